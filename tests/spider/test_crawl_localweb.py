"""The crawl against the local web (SEAMS §1): real HTTP over loopback through the localweb proxy."""
from __future__ import annotations

import base64
import hashlib
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from localweb import LocalWeb, load_config
from crawl_helpers import ROOT, crawl_command, env, finished, read_warc, run_crawl

IANA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "warc" / "pywb" / "warcs" / "iana.warc.gz"
# A small web whose slow page outlasts the crawl's 2 s timeout and whose huge page passes the size cap.
WEB = ["pages_per_host=6", "slow_page_seconds=4", "large_page_bytes=300000"]


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crawl")
    with LocalWeb(load_config(WEB)) as web:
        run = run_crawl(web.seeds, tmp, ["proxy=" + web.proxy_url, "depth_limit=4", "max_pages_per_host=30",
                                         "download_maxsize_bytes=200000"])
        hits = web.hits.snapshot()
        truth = web.truth
    assert run.returncode == 0, run.log[-3000:]
    records = {path: read_warc(path) for path in run.warc_files}
    return run, hits, truth, records


def responses(records):
    return [r for recs in records.values() for r in recs if r["type"] == "response"]


def test_crawl_finishes_and_reports_the_seam_counters(crawled):
    run, hits, truth, records = crawled
    stats = run.stats
    assert stats["finish_reason"] == "finished"
    revisits = [r for recs in records.values() for r in recs if r["type"] == "revisit"]
    assert stats["pages_fetched"] == len(responses(records)) + len(revisits) > 30
    assert stats["warc_revisits"] == len(revisits) > 0  # the mirror host serves copies: stored once, then revisits
    assert stats["warc_files"] == len(run.warc_files)
    assert stats["warc_records"] == sum(len(r) for r in records.values())
    assert stats["warc_bytes"] == sum(p.stat().st_size for p in run.warc_files)
    assert stats["requests"] >= stats["pages_fetched"]
    assert sum(stats["hosts"].values()) == stats["pages_fetched"]
    assert "scrapy" in stats and stats["elapsed_s"] > 0
    assert "progress:" in run.log and "crawl finished" in run.log


def test_robots_disallowed_paths_are_never_fetched(crawled):
    run, hits, truth, records = crawled
    for (host, target), _ in hits.items():
        rules = truth.hosts[host]
        if rules.robots_status >= 500:   # RFC 9309: unreachable robots.txt means disallow all
            assert target == "/robots.txt", f"{host}{target} fetched although its robots.txt answered 5xx"
        else:
            assert not any(target.startswith(d) for d in rules.disallow), f"{host}{target} is disallowed"
    assert run.stats["robots_denied"] > 0
    assert all(hits.get((h, "/robots.txt"), 0) >= 1 for h in {h for h, _ in hits})


def test_every_response_has_its_request_and_digests_verify(crawled):
    run, hits, truth, records = crawled
    assert not list(run.warc_files[0].parent.glob("*.open"))
    for path, recs in records.items():
        assert path.name.endswith(".warc.gz") and recs[0]["type"] == "warcinfo"
        by_id = {r["headers"].get_header("WARC-Record-ID"): r for r in recs if r["type"] == "response"}
        fetches = {r["headers"].get_header("WARC-Record-ID") for r in recs if r["type"] in ("response", "revisit")}
        linked = [r["headers"].get_header("WARC-Concurrent-To") for r in recs if r["type"] == "request"]
        assert sorted(linked) == sorted(fetches), "each response or revisit needs exactly one request record"
        for rec in recs:
            assert rec["headers"].protocol == "WARC/1.1"
            assert rec["digest_ok"] is not False
        for rec in by_id.values():
            assert rec["headers"].get_header("WARC-Payload-Digest") == sha1_b32(rec["raw"])
            assert rec["headers"].get_header("WARC-Block-Digest").startswith("sha1:")
            assert rec["headers"].get_header("WARC-IP-Address") == "127.0.0.1"   # the proxy we contacted


def test_gzip_bodies_are_stored_as_received_and_redirects_recorded(crawled):
    run, hits, truth, records = crawled
    by_url = {r["headers"].get_header("WARC-Target-URI"): r for r in responses(records)}
    gzipped = [p.url for p in truth.pages.values() if p.content_encoding == "gzip" and p.url in by_url]
    assert gzipped, "the crawl should reach at least one gzip-encoded page"
    for url in gzipped:
        rec = by_url[url]
        assert rec["http"].get_header("Content-Encoding") == "gzip"
        assert rec["raw"][:2] == b"\x1f\x8b", f"{url} was stored decoded"
    statuses = {int(r["http"].get_statuscode()) for r in responses(records)}
    assert {301, 302, 404, 500, 429} <= statuses   # non-2xx answers are archived too


def test_bad_answers_are_counted_not_fatal(crawled):
    run, hits, truth, records = crawled
    errors = run.stats["errors"]
    assert errors.get("timeout", 0) >= 1          # blog's slow page
    assert errors.get("too_large", 0) >= 1        # wiki's huge page, above download_maxsize_bytes
    assert errors.get("http_500", 0) >= 1 and errors.get("http_404", 0) >= 1
    assert run.stats["responses_by_status"].get("429", 0) >= 1
    assert hits[("blog.weblm.test", "/popular")] == 2   # retried once (retry_times=1), then counted


def test_calendar_trap_is_bounded_by_the_host_budget(tmp_path):
    with LocalWeb(load_config(WEB)) as web:
        events = next(s for s in web.seeds if urlsplit(s).hostname.startswith("events."))
        run = run_crawl([events], tmp_path, ["proxy=" + web.proxy_url, "depth_limit=100", "max_pages_per_host=6"])
        fetched = web.hits.count(urlsplit(events).hostname)
    assert run.returncode == 0, run.log[-2000:]
    assert fetched <= 6 + 1   # the budget plus robots.txt
    assert run.stats["filtered"].get("host_budget", 0) > 0


def test_sigterm_closes_and_renames_warc_files(tmp_path):
    with LocalWeb(load_config(["pages_per_host=30"])) as web:
        cmd = crawl_command(web.seeds, tmp_path, ["proxy=" + web.proxy_url, "download_delay_s=0.2"])
        log = tmp_path / "crawl.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while web.hits.count() < 15 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert list((tmp_path / "warc").glob("*.warc.gz.open")), "crawl should be writing by now"
            proc.send_signal(signal.SIGTERM)
            returncode = proc.wait(timeout=30)
    run = finished(returncode, tmp_path, log.read_text())
    assert run.returncode == 0, run.log[-2000:]
    assert run.stats["finish_reason"] == "shutdown"
    assert run.warc_files and all(p.name.endswith(".warc.gz") for p in run.warc_files)
    written = sum(1 for p in run.warc_files for r in read_warc(p) if r["type"] == "response")
    assert written == run.stats["pages_fetched"] > 0


@pytest.mark.skipif(not IANA.exists(), reason=f"shared replay file {IANA} is absent")
def test_replayed_iana_warc_can_be_crawled(tmp_path):
    with LocalWeb(load_config(WEB), replay=[IANA]) as web:
        seeds = [s for s in web.seeds if urlsplit(s).hostname in set(web.replay_hosts)]
        run = run_crawl(seeds, tmp_path, ["proxy=" + web.proxy_url, "close_after_pages=25"])
    assert run.returncode == 0, run.log[-2000:]
    iana_pages = sum(n for h, n in run.stats["hosts"].items() if "iana" in h)
    assert iana_pages >= 2, run.stats["hosts"]   # a seed and at least one followed link
    urls = {r["headers"].get_header("WARC-Target-URI") for p in run.warc_files for r in read_warc(p)
            if r["type"] == "response"}
    assert any("iana.org" in u for u in urls)
    assert not any("#" in u for u in urls), "fragments must be stripped before fetching"
