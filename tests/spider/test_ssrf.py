"""The SSRF guard: a crawl never connects to private, loopback or link-local addresses unless conf allows them.

The raw server listens on 127.0.0.1 and is reached without a proxy under the name `localhost`, so the name is
resolved by the crawl's own resolver (spider/frontier/dns.py), where the guard sits."""
from __future__ import annotations

from crawl_helpers import run_crawl

PAGE = b"<html><body><a href='/a'>a</a></body></html>"


def _site(path: str):
    if path == "/robots.txt":
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(PAGE), PAGE


def test_a_name_resolving_to_loopback_is_refused_unless_allowed(tmp_path, raw_server):
    server = raw_server(_site)
    seed = f"http://localhost:{server.port}/"
    refused = run_crawl([seed], tmp_path / "refused", ["frontier.ssrf_allow=[]"])
    assert refused.returncode == 0, refused.log[-3000:]
    assert server.received == {}, "the guard let a request through to a loopback address"
    # its robots.txt is the first request refused: the host is unreachable, so nothing else is asked either
    assert f"robots.txt for localhost:{server.port} could not be fetched (dns" in refused.log
    assert "refused by the SSRF guard" in refused.log

    allowed = run_crawl([seed], tmp_path / "allowed", ["frontier.ssrf_allow=[127.0.0.0/8]"])
    assert allowed.returncode == 0, allowed.log[-3000:]
    assert set(server.received) == {"/robots.txt", "/", "/a"}


def test_a_literal_private_address_is_never_queued(tmp_path, raw_server):
    server = raw_server(_site)
    run = run_crawl([f"http://127.0.0.1:{server.port}/"], tmp_path, ["frontier.ssrf_allow=[]"])
    assert run.returncode == 0, run.log[-3000:]
    assert server.received == {}
    assert run.stats["filtered"].get("ssrf_private_address") == 1
