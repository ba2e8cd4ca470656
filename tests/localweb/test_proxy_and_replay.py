"""The proxy's routing rules, WARC replay, the hit counter, and the CLI."""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import ProxyHandler, build_opener

import pytest

from localweb import LocalWeb, load_config
from localweb.replay import load_replay
from localweb_client import BAD_WARC, IANA, SMALL, fetch

ROOT = Path(__file__).resolve().parents[2]
needs_iana = pytest.mark.skipif(not IANA.exists(), reason=f"shared data absent: {IANA}")


def test_unknown_host_gets_502_and_nothing_leaves_loopback(web):
    status, _, body = fetch(web, "http://example.org/")
    assert status == 502 and b"never forwards to a real network" in body


def test_origin_form_uses_host_header_or_explains_it_is_a_proxy(web):
    proxy = urlsplit(web.proxy_url)
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=5)
    conn.request("GET", "/robots.txt", headers={"Host": "news.weblm.test"})
    resp = conn.getresponse()
    assert resp.status == 200 and b"Disallow: /private/" in resp.read()
    conn.request("GET", "/")   # Host: 127.0.0.1:<port>
    resp = conn.getresponse()
    assert resp.status == 400 and b"forward proxy" in resp.read()
    conn.close()


def test_head_has_headers_but_no_body(web):
    status, headers, body = fetch(web, "http://news.weblm.test/", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 1000


def test_post_is_refused_with_405(web):
    assert fetch(web, "http://news.weblm.test/", method="POST")[0] == 405


def test_urllib_proxy_handler_works_and_hits_are_counted(web):
    before = web.hits[("wiki.weblm.test", "/about.html")]
    opener = build_opener(ProxyHandler({"http": web.proxy_url}))
    with opener.open("http://wiki.weblm.test/about.html", timeout=5) as resp:
        assert resp.status == 200 and b"<article>" in resp.read()
    assert web.hits[("wiki.weblm.test", "/about.html")] == before + 1
    assert web.hits.log("wiki.weblm.test")[-1].status == 200


@needs_iana
def test_replay_serves_iana_home_and_the_pages_it_links_to(web):
    assert "http://www.iana.org/" in web.seeds
    status, headers, body = fetch(web, "http://www.iana.org/")
    assert status == 200 and headers["content-type"].lower().startswith("text/html")
    assert b"Internet Assigned Numbers Authority" in body
    assert "transfer-encoding" not in headers and int(headers["content-length"]) == len(body)
    for path in ("/domains", "/numbers", "/protocols", "/about"):
        assert fetch(web, f"http://www.iana.org{path}")[0] == 200, path
    assert fetch(web, "http://www.iana.org/?")[0] == 200            # trailing "?" matches
    assert fetch(web, "http://WWW.IANA.ORG/")[0] == 200             # host is case-insensitive
    assert fetch(web, "http://www.iana.org/not-captured")[0] == 404


@needs_iana
def test_replay_counts_revisits_and_serves_each_url_once():
    archive = load_replay([IANA])
    assert archive.counts["responses"] + archive.counts["duplicates_skipped"] == 48
    assert archive.counts["revisits_skipped"] > 0
    assert archive.seeds == ["http://www.iana.org/"]


@pytest.mark.skipif(not BAD_WARC.exists(), reason=f"shared data absent: {BAD_WARC}")
def test_malformed_warc_is_counted_not_fatal():
    archive = load_replay([BAD_WARC])
    assert archive.counts["malformed_skipped"] >= 1 and archive.counts["files"] == 1


def test_missing_replay_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LocalWeb(load_config(SMALL), replay=[tmp_path / "nope.warc.gz"])


def test_cli_prints_one_json_line_and_stops_on_sigterm():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "localweb", "serve", *sum((["-o", o] for o in SMALL), [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["proxy"].startswith("http://127.0.0.1:") and "http://news.weblm.test/" in ready["seeds"]
        opener = build_opener(ProxyHandler({"http": ready["proxy"]}))
        with opener.open("http://blog.weblm.test/robots.txt", timeout=5) as resp:
            assert b"Crawl-delay" in resp.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == ""      # exactly one line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_truth_dumps_json(tmp_path):
    out = tmp_path / "truth.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "localweb", "truth", "--out", str(out), *sum((["-o", o] for o in SMALL), [])],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    truth = json.loads(out.read_text())
    assert truth["hosts"]["status.weblm.test"]["robots_status"] == 500
    dups = [p for p in truth["pages"].values() if p["duplicate_of"]]
    assert len(dups) == 4
