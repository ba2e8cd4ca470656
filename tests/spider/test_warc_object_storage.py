"""WARC files on object storage (SEAMS §2): a real crawl of the local web into a bucket on a real S3 API
server (moto over HTTP), through outages made by a relay that refuses every connection.

Files are written in the local buffer and uploaded as they close; a file leaves the buffer, and is
announced by `warc_file_durable`, only once the bucket holds it.
"""
from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import storage
from crawl_helpers import ROOT, crawl_command, env, read_warc, run_crawl
from localweb import LocalWeb, load_config
from spider.seeds import SeedError, read_seeds
from spider.warc_upload import WarcUploads
from tests.support.s3server import FlakyRelay, storage_overlay

# Two small hosts that finish on their own (no page limit), so two crawls of them fetch the same URLs.
WEB = ["pages_per_host=4", "slow_page_seconds=4", "large_page_bytes=300000"]
HOSTS = ("news.", "wiki.")
SMALL_FILES = ["warc.max_file_bytes=8000", "download_maxsize_bytes=200000",
               "scheduler=tests.spider.durable_probe.DurableProbeScheduler"]
QUICK_UPLOADS = {"retries": 40, "backoff_initial_s": 0.05, "backoff_max_s": 0.3, "workers": 2}


def seeds_of(web: LocalWeb) -> list[str]:
    return [s for s in web.seeds if urlsplit(s).hostname.startswith(HOSTS)]


def fetches(files) -> Counter:
    """(URL, kind) of every request and response record in the files."""
    return Counter((r["headers"].get_header("WARC-Target-URI"), r["type"])
                   for f in files for r in read_warc(f) if r["type"] in ("request", "response"))


def response_urls(path) -> list[str]:
    return [r["headers"].get_header("WARC-Target-URI") for r in read_warc(path) if r["type"] == "response"]


def probe_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def buffer_warcs(buffer: Path) -> list[Path]:
    return sorted(p for p in buffer.glob("*.warc.gz*")) if buffer.exists() else []


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """The file each durable signal is recorded in (tests/spider/durable_probe.py)."""
    path = tmp_path / "durable.jsonl"
    monkeypatch.setenv("WEBLM_DURABLE_PROBE", str(path))
    return path


@pytest.fixture
def relay(s3, s3_server, tmp_path, monkeypatch):
    """The bucket's server behind a relay that the test can make refuse every connection."""
    relay = FlakyRelay(s3_server.port)
    one_try = {"endpoint_url": relay.endpoint, "path_style": True, "max_attempts": 1}  # our retries, not botocore's
    overlay = storage_overlay(tmp_path / "relay.yaml", relay.endpoint,
                              {"storage": {"s3": one_try, "upload": QUICK_UPLOADS}})
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(overlay))
    storage.reset()
    yield relay
    relay.close()


def test_a_crawl_into_the_bucket_holds_what_a_local_crawl_writes(bucket, tmp_path, probe):
    local, remote = tmp_path / "local", tmp_path / "remote"
    local.mkdir(), remote.mkdir()
    with LocalWeb(load_config(WEB)) as web:
        on_disk = run_crawl(seeds_of(web), local, ["proxy=" + web.proxy_url, *SMALL_FILES])
    assert on_disk.returncode == 0, on_disk.log[-3000:]
    local_probe = probe_lines(probe)
    probe.unlink()

    buffer = remote / "buffer"
    with LocalWeb(load_config(WEB)) as web:
        run = run_crawl(seeds_of(web), remote, ["proxy=" + web.proxy_url, *SMALL_FILES,
                                                f"paths.warc_buffer={buffer}"],
                        warc_dir=f"{bucket}/warc", stats=f"{bucket}/crawl/stats.json", seeds_at=f"{bucket}/seeds.txt")
    assert run.returncode == 0, run.log[-3000:]

    in_bucket = storage.glob(f"{bucket}/warc", "*.warc.gz")
    stats = json.loads(storage.read_text(f"{bucket}/crawl/stats.json"))
    assert len(in_bucket) == stats["warc_files"] >= 3, "several files, every one of them in the bucket"
    assert buffer_warcs(buffer) == [], "the buffer ends empty"
    assert fetches(in_bucket) == fetches(on_disk.warc_files), "the bucket holds the fetches a local crawl writes"
    assert all(rec["digest_ok"] is not False for f in in_bucket for rec in read_warc(f))
    upload = stats["warc_upload"]
    assert upload["files_uploaded"] == len(in_bucket) and upload["files_in_buffer"] == 0
    assert upload["bytes_uploaded"] == sum(storage.size(f) for f in in_bucket) == stats["warc_bytes"]
    assert upload["attempts_failed"] == 0 and upload["buffer"] == str(buffer)
    assert stats["warc_files_durable"] == len(in_bucket)
    assert f"uploads to {bucket}/warc: {len(in_bucket)} file(s)" in run.log

    durable = probe_lines(probe)
    assert sorted(d["location"] for d in durable) == in_bucket
    for d in durable:  # announced only once the bucket held the whole file, with exactly what it holds
        assert d["exists_at_signal"] and d["size_at_signal"] == d["bytes"] == storage.size(d["location"])
        assert d["urls"] == response_urls(d["location"]) and not d["recovered"]
        assert len(d["record_ids"]) == len(d["urls"])
    # a local warc_dir: announced once the file is renamed to its final name
    assert sorted(d["location"] for d in local_probe) == sorted(map(str, on_disk.warc_files))
    assert all(d["exists_at_signal"] and d["open_at_signal"] is False for d in local_probe)


def test_an_outage_during_the_crawl_loses_nothing(s3, relay, tmp_path, probe):
    buffer = tmp_path / "buffer"
    relay.refusing.set()
    with LocalWeb(load_config(WEB)) as web:
        cmd = crawl_command(seeds_of(web), tmp_path, ["proxy=" + web.proxy_url, *SMALL_FILES,
                                                      "download_delay_s=0.3", f"paths.warc_buffer={buffer}"],
                            warc_dir=f"{s3}/warc", stats=f"{s3}/crawl/stats.json")
        log_path = tmp_path / "crawl.log"
        with open(log_path, "w") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while not ("attempt 1 failed" in log_path.read_text() and len(list(buffer.glob("*.warc.gz"))) >= 2):
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.05)
            crawling_during_outage = proc.poll() is None
            closed_during_outage = len(list(buffer.glob("*.warc.gz")))
            durable_during_outage = probe_lines(probe)
            relay.refusing.clear()  # the store answers again
            proc.wait(timeout=120)
        log = log_path.read_text()
    assert proc.returncode == 0, log[-3000:]
    assert crawling_during_outage and closed_during_outage >= 2
    assert durable_during_outage == [], "nothing is acknowledged while the store refuses"

    in_bucket = storage.glob(f"{s3}/warc", "*.warc.gz")
    stats = json.loads(storage.read_text(f"{s3}/crawl/stats.json"))
    upload = stats["warc_upload"]
    assert relay.refused > 0 and upload["attempts_failed"] > 0
    assert len(in_bucket) == stats["warc_files"] == upload["files_uploaded"] and upload["files_in_buffer"] == 0
    assert buffer_warcs(buffer) == []
    assert sum(n for (_, kind), n in fetches(in_bucket).items() if kind == "response") == stats["pages_fetched"]
    assert sorted(d["location"] for d in probe_lines(probe)) == in_bucket


def test_an_outage_that_outlasts_the_crawl_leaves_the_files_for_the_next_start(s3, relay, tmp_path, probe):
    buffer, first, second = tmp_path / "buffer", tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    relay.refusing.set()
    with LocalWeb(load_config(WEB)) as web:
        down = run_crawl(seeds_of(web), first, ["proxy=" + web.proxy_url, *SMALL_FILES, "warc.upload_wait_s=3",
                                                f"paths.warc_buffer={buffer}"],
                         warc_dir=f"{s3}/warc", stats=f"{s3}/crawl/stats.json")
    assert down.returncode == 0, down.log[-3000:]  # the crawl itself succeeded
    (kept_stats,) = buffer.glob("crawl-stats-*.json")  # the store refused them too: kept, and named
    assert f"crawl counters could not be written to {s3}/crawl/stats.json" in down.log and str(kept_stats) in down.log
    stats = json.loads(kept_stats.read_text())
    left = [p.name for p in buffer_warcs(buffer)]
    upload = stats["warc_upload"]
    assert len(left) == stats["warc_files"] == upload["files_in_buffer"] >= 3
    assert upload["files_left"] == left and upload["bytes_in_buffer"] == stats["warc_bytes"]
    assert upload["files_uploaded"] == 0 and upload["attempts_failed"] > 0
    assert f"WARNING: {len(left)} WARC file(s)" in down.log and str(buffer) in down.log
    assert all(name in down.log for name in left)
    assert probe_lines(probe) == []
    written = fetches(buffer / name for name in left)

    relay.refusing.clear()
    with LocalWeb(load_config(WEB)) as web:
        news = [s for s in web.seeds if urlsplit(s).hostname.startswith("news.")]
        up = run_crawl(news, second, ["proxy=" + web.proxy_url, *SMALL_FILES, "close_after_pages=2",
                                      f"paths.warc_buffer={buffer}"], warc_dir=f"{s3}/warc")
    assert up.returncode == 0, up.log[-3000:]
    upload = up.stats["warc_upload"]
    assert upload["files_recovered"] == len(left) and upload["files_in_buffer"] == 0
    assert upload["files_uploaded"] == len(left) + up.stats["warc_files"]
    assert buffer_warcs(buffer) == []
    assert fetches(f"{s3}/warc/{name}" for name in left) == written, "the first crawl's files arrived whole"
    recovered = [d for d in probe_lines(probe) if d["recovered"]]
    assert sorted(d["name"] for d in recovered) == left
    assert all(d["exists_at_signal"] and d["urls"] == response_urls(d["location"]) for d in recovered)


def test_a_killed_crawl_s_open_file_is_salvaged_whole_and_sent_by_the_next_start(s3, tmp_path, probe):
    buffer, first, second = tmp_path / "buffer", tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    with LocalWeb(load_config(WEB)) as web:
        cmd = crawl_command(seeds_of(web), first, ["proxy=" + web.proxy_url, "warc.max_file_bytes=10000000",
                                                   "download_delay_s=0.1", f"paths.warc_buffer={buffer}"],
                            warc_dir=f"{s3}/warc")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while sum(p.stat().st_size for p in buffer.glob("*.open")) < 30000 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # no chance to close anything
        proc.wait(timeout=10)
    (left_open,) = buffer.glob("*.warc.gz.open")

    with LocalWeb(load_config(WEB)) as web:
        news = [s for s in web.seeds if urlsplit(s).hostname.startswith("news.")]
        run = run_crawl(news, second, ["proxy=" + web.proxy_url, "close_after_pages=2", *SMALL_FILES,
                                       f"paths.warc_buffer={buffer}"], warc_dir=f"{s3}/warc")
    assert run.returncode == 0, run.log[-3000:]
    assert run.stats["warc_upload"]["files_salvaged"] == 1 and buffer_warcs(buffer) == []
    salvaged = storage.glob(f"{s3}/warc", "*.salvaged.warc.gz")
    assert [Path(s).name for s in salvaged] == [left_open.name.replace(".warc.gz.open", ".salvaged.warc.gz")]
    assert storage.glob(f"{s3}/warc", "*.open") == []
    records = read_warc(salvaged[0])
    assert records[0]["type"] == "warcinfo" and all(r["digest_ok"] is not False for r in records)
    responses = {r["headers"].get_header("WARC-Record-ID") for r in records if r["type"] == "response"}
    requests = [r["headers"].get_header("WARC-Concurrent-To") for r in records if r["type"] == "request"]
    assert responses and sorted(requests) == sorted(responses), "whole fetches only: each response with its request"
    (announced,) = [d for d in probe_lines(probe) if d["name"] == Path(salvaged[0]).name]
    assert announced["recovered"] and announced["urls"] == response_urls(salvaged[0])


def test_a_second_crawl_on_a_busy_buffer_does_not_start(s3, tmp_path):
    holder = WarcUploads(tmp_path / "buffer", f"{s3}/warc", on_durable=lambda warc: None)
    try:
        run = run_crawl(["http://news.weblm.test/"], tmp_path, [f"paths.warc_buffer={tmp_path / 'buffer'}"],
                        warc_dir=f"{s3}/warc")
    finally:
        holder.finish(timeout_s=5)
    assert run.returncode == 1
    assert f"WARC buffer {tmp_path / 'buffer'} is in use by another crawl" in run.log
    assert "-o paths.warc_buffer=" in run.log and "the crawl did not start" in run.log


def test_a_seed_file_in_the_bucket_that_is_not_there_is_named(s3):
    with pytest.raises(SeedError, match=rf"seed file {s3}/nowhere/seeds.txt does not exist"):
        read_seeds(f"{s3}/nowhere/seeds.txt")
