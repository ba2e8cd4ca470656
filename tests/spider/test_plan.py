"""spider/plan.py: the crawl capacity planner's numbers, its politeness bound, and its command line."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from conf import CONF_DIR, build, read_section
from spider.plan import PlanConfig, load_plan_config, main, plan, render

CHECKOUT = CONF_DIR.parent


@pytest.fixture(autouse=True)
def plain_conf(monkeypatch):
    """The checkout's conf/crawl_plan.yaml, whatever overlay the shell running the tests has set."""
    monkeypatch.delenv("WEBLM_CONF_OVERLAY", raising=False)
    monkeypatch.delenv("WEBLM_CONF_DIR", raising=False)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("WEBLM_CONF_OVERLAY", "WEBLM_CONF_DIR")}
    env["PYTHONPATH"] = str(CHECKOUT)
    return subprocess.run([sys.executable, "-m", "spider.plan", *args], cwd=CHECKOUT, env=env,
                          capture_output=True, text=True, timeout=60)


def planned(**given) -> dict:
    return plan(load_plan_config(given))


def test_the_worked_example_10_billion_pages_in_30_days():
    """The issue's figures: ~3,900 pages/s, ~1,000 workers, ~1.2 PB of compressed WARC per pass."""
    out = run_cli("--json", "--pages", "10_000_000_000", "--refresh-days", "30")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert int(result["rate"]["required_pages_per_s"]) == 3858  # 1e10 / 2,592,000 s
    assert round(result["rate"]["pages_per_s"], -2) == 3900
    assert result["workers"]["per_worker_pages_per_s"] == 4.0  # 16 slots / 4 s per fetch, below the core's 20
    assert result["workers"]["bound"] == "concurrency"
    assert result["workers"]["workers"] == 965 and round(result["workers"]["workers"], -3) == 1000
    assert result["workers"]["machines"] == 61  # 16 cores each
    assert round(result["storage"]["pass_bytes"] / 1e15, 1) == 1.2
    assert result["politeness"]["bound"] is False
    assert result["politeness"]["hosts"] == 50_000_000  # 1e10 pages at 200 per host
    assert result["politeness"]["hosts_needed"] == 20_255  # 3,858 pages/s x 5.25 s per host cycle


def test_the_table_shows_each_number_with_its_formula():
    out = run_cli("--pages", "1e10", "--days", "30")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("Crawl plan: 10,000,000,000 pages every 30 days: 3,858 pages/s, 965 workers on 61 "
                           "machines, 1.22 PB of WARC per pass")
    for line in ("= 10,000,000,000 pages / (30 d x 86,400 s)",
                 "= min(cpu 20, concurrent_requests 16 / fetch_s 4): concurrency-bound",
                 "= ceil(rate / per worker), one per core",
                 "= fetch_s 4 + delay_s 1 x (1 + jitter 0.5 / 2)",
                 "= required x host cycle; 50,000,000 given: enough"):
        assert line in text
    for section in ("rate", "workers", "politeness", "network", "storage (compressed WARC)", "frontier (Redis)", "DNS"):
        assert f"\n{section}\n" in text


def test_politeness_bound_when_too_few_hosts_carry_the_pages():
    """10 M pages over 1,000 hosts in 6 hours: each host would need 10,000 fetches at one per 5.25 s (14.6 h)."""
    result = planned(pages=10_000_000, hosts=1000, max_pages_per_host=10_000, refresh_days=0.25)
    polite = result["politeness"]
    assert polite["bound"] is True and polite["hosts_enough"] is False
    assert polite["hosts_needed"] == 2431  # 463 pages/s x 5.25 s > 1,000 hosts
    assert polite["largest_host_s"] == pytest.approx(10_000 * 5.25)
    assert result["rate"]["pages_per_s"] == pytest.approx(1000 / 5.25)  # every host busy all the time
    assert result["rate"]["pass_days"] == pytest.approx(52_500 / 86_400)
    assert result["workers"]["workers"] == 48  # sized for the rate politeness allows, not the one asked for
    text = render(result)
    assert "POLITENESS-BOUND" in text and "TOO FEW" in text
    assert "The crawl is politeness-bound: at most 190 pages/s, a full pass in 0.608 days." in text


def test_a_worker_is_cpu_bound_once_it_has_slots_enough():
    result = planned(pages=10_000_000_000, refresh_days=30, concurrent_requests=80)
    assert result["workers"]["bound"] == "cpu"
    assert result["workers"]["per_worker_pages_per_s"] == 20.0
    assert result["workers"]["workers"] == 193  # ceil(3,858 / 20)
    assert planned(pages=10_000_000_000)["workers"]["concurrent_requests_for_cpu_bound"] == 80


def test_storage_and_frontier_memory():
    result = planned(pages=1_000_000_000, recrawl_fraction=0.5, replication=3, warc_bytes_per_fetch=50_000)
    storage = result["storage"]
    assert storage["warc_bytes_per_fetch"] == 50_000  # a measured figure wins over the derived one
    assert storage["pass_bytes"] == 5e13 and storage["pass_bytes_stored"] == 1.5e14
    assert storage["period_bytes"] == 2.5e13
    frontier = result["frontier"]
    assert 29 <= frontier["bloom_bits_per_url"] <= 38  # 1e-6, capacity = pages: one stage at 5e-7
    assert frontier["bloom_stages"] == 1
    assert frontier["url_records"] == 1_000_000_000  # recrawls keep every URL's record
    assert frontier["total_bytes"] == pytest.approx(frontier["bloom_bytes"] + frontier["url_record_bytes"]
                                                    + frontier["digest_bytes"] + frontier["host_bytes"])
    fetch_once = planned(pages=1_000_000_000, recrawl_fraction=0)["frontier"]
    assert fetch_once["url_records"] == 500_000_000  # only the queued peak (queued_fraction 0.5)
    grown = planned(pages=1_000_000_000, bloom_capacity=100_000_000)["frontier"]
    assert grown["bloom_stages"] == 4 and grown["bloom_bits_per_url"] > 38  # too small a first stage costs more


def test_dns_lookups_follow_the_rotation_over_hosts():
    wide = planned(pages=10_000_000_000)
    assert wide["dns"]["lookups_per_s"] == pytest.approx(wide["rate"]["pages_per_s"], rel=1e-3)  # every fetch misses
    narrow = planned(pages=1_000_000, hosts=10, max_pages_per_host=100_000, refresh_days=7)
    assert narrow["workers"]["workers"] == 1
    assert narrow["dns"]["host_revisit_s"] == pytest.approx(10 / narrow["rate"]["pages_per_s"])  # ~6 s
    assert narrow["dns"]["lookups_per_s"] < narrow["rate"]["pages_per_s"] / 10  # one worker's cache catches most


@pytest.mark.parametrize("args, message", [
    (["--pages", "0"], "--pages must be at least 1, got 0"),
    (["--pages", "lots"], "argument --pages: 'lots' is not a number"),
    (["--pages", "1.5"], "argument --pages: '1.5' is not a whole number"),
    (["--refresh-days", "0"], "--refresh-days must be above 0"),
    (["--recrawl-fraction", "2"], "--recrawl-fraction is a fraction between 0 and 1"),
    (["--pages", "1e7", "--hosts", "1000"], "10,000,000 pages do not fit in 1,000 hosts x 200 pages per host"),
    (["--hosts", "0", "--max-pages-per-host", "0"], "cannot both be 0"),
    (["--bloom-fp-rate", "1"], "--bloom-fp-rate must be between 0 and 1"),
])
def test_bad_input_exits_2_with_a_message(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_input_on_the_command_line():
    out = run_cli("--pages", "0")
    assert out.returncode == 2
    assert "python -m spider.plan: error: --pages must be at least 1, got 0" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_every_setting_has_its_default_and_comment_in_yaml_only():
    """Defaults live once, in conf/crawl_plan.yaml, one commented line each; each is also a flag."""
    for field in dataclasses.fields(PlanConfig):
        assert field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING, field.name
    build(PlanConfig, read_section("crawl_plan"), where="crawl_plan")
    text = (CONF_DIR / "crawl_plan.yaml").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert sorted(line.split(":")[0] for line in lines) == sorted(f.name for f in dataclasses.fields(PlanConfig))
    assert all(" # " in line for line in lines)
    help_text = run_cli("--help").stdout
    assert "--max-pages-per-host N" in help_text and "Heritrix" in help_text  # the YAML comment is the help


def test_an_overlay_changes_the_defaults(tmp_path, monkeypatch):
    overlay = tmp_path / "plan.yaml"
    overlay.write_text("crawl_plan:\n  cores_per_machine: 64\n")
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(overlay))
    assert planned(pages=10_000_000_000)["workers"]["machines"] == 16  # ceil(965 / 64)
