"""robots.txt as RFC 9309 says, fetched by the frontier once per host and cached for the cluster.

One crawl over hosts whose robots.txt answers every way a server can: rules, 404, 500, 503, 429, a closed
connection, a hang past the timeout, a redirect chain, a redirect loop, a file over 500 KiB, garbage.  Each host's
home page links to /a and /private/x.
"""
from __future__ import annotations

import os
import time

import pytest

from crawl_helpers import run_crawl

PAGE = b"<html><body><a href='/a'>a</a> <a href='/private/x'>x</a> <a href='/late/y'>y</a></body></html>"
RULES = b"User-agent: *\nDisallow: /private/\n"
HUGE = b"User-agent: *\nDisallow: /private/\n" + b"# padding\n" * 55_000 + b"Disallow: /late/\n"  # rule past 500 KiB
GARBAGE = bytes(range(256)) * 40 + os.urandom(2000)


def ok(body: bytes, kind: bytes = b"text/html", status: bytes = b"200 OK") -> tuple[bytes, bytes]:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status, kind, len(body)), body


def moved(to: str) -> tuple[bytes, bytes]:
    return b"HTTP/1.1 301 Moved Permanently\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % to.encode(), b""


def robots(host: str, path: str):
    name = host.split(".")[0]
    if path.startswith("/robots") or path.startswith("/hop"):
        if name == "rules":
            return ok(RULES, b"text/plain")
        if name == "gone":
            return ok(b"not here", b"text/plain", b"404 Not Found")
        if name in ("e500", "e503", "e429"):
            return ok(b"busy", b"text/plain", {"e500": b"500 Internal Server Error", "e503": b"503 Service Unavailable",
                                               "e429": b"429 Too Many Requests"}[name])
        if name == "down":
            return None
        if name == "hang":
            time.sleep(4)  # past the crawl's 2 s download timeout
            return None
        if name == "chain":
            hops = {"/robots.txt": "/hop1", "/hop1": "/hop2", "/hop2": "/robots-real.txt"}
            return moved(hops[path]) if path in hops else ok(RULES, b"text/plain")
        if name == "loop":
            return moved("/hop-a" if path != "/hop-a" else "/robots.txt")
        if name == "huge":
            return ok(HUGE, b"text/plain")
        if name == "garbage":
            return ok(GARBAGE, b"application/octet-stream")
    return ok(PAGE)


HOSTS = ["rules", "gone", "e500", "e503", "e429", "down", "hang", "chain", "loop", "huge", "garbage"]


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    from rawhttp import RawHttpServer
    server = RawHttpServer(robots, by_host=True)
    tmp = tmp_path_factory.mktemp("robots")
    try:
        run = run_crawl([f"http://{h}.weblm.test/" for h in HOSTS], tmp,
                        ["proxy=" + server.proxy_url(), "download_delay_s=0.3"], timeout=120)
    finally:
        server.close()
    assert run.returncode == 0, run.log[-3000:]
    fetched: dict[str, list[tuple[float, str]]] = {}
    for at, host, path in server.arrivals:
        fetched.setdefault(host.split(".")[0], []).append((at, path))
    return run, fetched


def pages(fetched, name):
    return {path for _, path in fetched.get(name, []) if not path.startswith(("/robots", "/hop"))}


def test_rules_are_obeyed_and_a_missing_file_allows_all(crawled):
    run, fetched = crawled
    assert pages(fetched, "rules") == {"/", "/a", "/late/y"}
    assert pages(fetched, "gone") == {"/", "/a", "/private/x", "/late/y"}  # 4xx: no rules (§2.3.1.3)
    assert pages(fetched, "garbage") == {"/", "/a", "/private/x", "/late/y"}  # nothing parseable: no rules


@pytest.mark.parametrize("name", ["e500", "e503", "e429", "down", "hang"])
def test_an_unreachable_robots_txt_disallows_the_host(crawled, name):
    run, fetched = crawled
    assert pages(fetched, name) == set(), f"{name}: pages fetched although robots.txt failed"
    # asked once for the whole crawl, not retried at once (the crawler's own count: weblm/robots/fetches, below).
    # A connection closed without an answer may be a kept-alive one the proxy reused: Twisted's pool then sends the
    # GET once more on a new connection (HTTPConnectionPool.retryAutomatically), which the server sees as a 2nd ask.
    asked = [p for _, p in fetched[name]]
    assert asked == ["/robots.txt"] or (name == "down" and asked == ["/robots.txt"] * 2), asked


def test_failures_are_counted_and_explained_without_tracebacks(crawled):
    run, fetched = crawled
    scrapy = run.stats["scrapy"]
    assert scrapy["weblm/robots/disallow_all"] == 5
    assert scrapy["weblm/robots/fetches"] == len(HOSTS)
    assert "robots.txt for down.weblm.test could not be fetched" in run.log
    assert "robots.txt for e503.weblm.test answered HTTP 503" in run.log
    assert "Traceback" not in run.log  # a hung robots.txt is a counted failure, not an ERROR from a middleware


def test_redirects_are_followed_up_to_five_hops_and_spaced_by_the_delay(crawled):
    run, fetched = crawled
    assert pages(fetched, "chain") == {"/", "/a", "/late/y"}  # the rules at the end of the chain
    chain = [at for at, _ in fetched["chain"]]
    assert min(b - a for a, b in zip(chain, chain[1:])) >= 0.3 * 0.95  # robots.txt hops count as requests
    loop_asks = [p for _, p in fetched["loop"] if p.startswith(("/robots", "/hop"))]
    assert len(loop_asks) == 6  # the first ask and five redirects, then "unavailable": no rules (§2.3.1.2)
    assert pages(fetched, "loop") == {"/", "/a", "/private/x", "/late/y"}


def test_only_the_first_500_kib_of_a_huge_file_is_read(crawled):
    run, fetched = crawled
    assert pages(fetched, "huge") == {"/", "/a", "/late/y"}  # /private/ (early) obeyed, /late/ (past 500 KiB) not


def test_a_failed_robots_txt_is_asked_again_after_its_ttl_and_its_urls_come_back(tmp_path, raw_server):
    answers = iter([ok(b"", b"text/plain", b"503 Service Unavailable")])

    def flaky(host, path):
        if path == "/robots.txt":
            return next(answers, None) or ok(RULES, b"text/plain")
        return ok(PAGE)

    server = raw_server(flaky, by_host=True)
    overrides = ["proxy=" + server.proxy_url(), "frontier.robots_error_ttl_s=1"]
    first = run_crawl(["http://flaky.weblm.test/"], tmp_path, overrides)
    assert first.returncode == 0 and first.stats["robots_denied"] == 1
    assert [p for _, _, p in server.arrivals] == ["/robots.txt"]
    time.sleep(1.2)
    second = run_crawl(["http://flaky.weblm.test/"], tmp_path, overrides)  # the same frontier: a resumed crawl
    assert second.returncode == 0, second.log[-3000:]
    assert [p for _, _, p in server.arrivals] == ["/robots.txt", "/robots.txt", "/", "/a", "/late/y"]


def test_crawl_delay_is_obeyed_up_to_its_cap(tmp_path, raw_server):
    delay_robots = b"User-agent: *\nCrawl-delay: 0.3\n\nUser-agent: weblm-spider\nCrawl-delay: 1000\n"

    def site(host, path):
        if path == "/robots.txt":
            return ok(delay_robots, b"text/plain")
        number = int(path.strip("/") or 0)
        return ok(b"<html><body><a href='/%d'>next</a></body></html>" % (number + 1) if number < 4 else b"<html/>")

    server = raw_server(site, by_host=True)
    cap = 0.6
    run = run_crawl(["http://delay.weblm.test/"], tmp_path,
                    ["proxy=" + server.proxy_url(), "download_delay_s=0.01", "randomize_delay=true",
                     f"max_crawl_delay_s={cap}"])
    assert run.returncode == 0, run.log[-3000:]
    pages_at = [at for at, _, path in server.arrivals if path != "/robots.txt"]
    assert len(pages_at) == 5
    gaps = [b - a for a, b in zip(pages_at, pages_at[1:])]
    # our agent's group (Crawl-delay 1000) wins over '*', capped; jitter only lengthens a gap
    assert min(gaps) >= cap * 0.95, gaps
    assert max(gaps) < cap * 10, gaps
    assert run.stats["scrapy"]["weblm/robots/crawl_delay_hosts"] == 1
    assert "capped at crawl.max_crawl_delay_s" in run.log
