"""robots.txt beyond Allow/Disallow: an unreachable file, and Crawl-delay.

- A robots.txt that cannot be fetched at all means complete disallow (RFC 9309 §2.3.1.4): the
  server closes the connection unanswered whenever robots.txt is asked for, while its pages would
  answer.  Stock Scrapy would crawl them without rules (fail open).
- A Crawl-delay longer than the download delay spaces that host's requests, up to a cap.
"""
from __future__ import annotations

from crawl_helpers import run_crawl

PAGE = b"<html><body><a href='/a'>a</a><a href='/b'>b</a></body></html>"


def _answer(path: str):
    if path == "/robots.txt":
        return None
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(PAGE), PAGE



def test_unreachable_robots_txt_disallows_the_host_and_is_counted(tmp_path, raw_server):
    server = raw_server(_answer)
    run = run_crawl(["http://down.weblm.test/", "http://down.weblm.test/a"], tmp_path,
                    ["proxy=" + server.proxy_url(), "retry_times=1"])
    assert run.returncode == 0, run.log[-3000:]
    assert set(server.received) == {"/robots.txt"}  # asked (and retried), never a page
    assert run.stats["robots_denied"] == 2
    assert run.stats["scrapy"]["weblm/robots/unreachable_disallow_all"] == 1
    assert "robots.txt for down.weblm.test could not be fetched" in run.log
    assert "RFC 9309" in run.log


def _delay_site(path: str):
    """Two hosts behind one proxy: robots.txt asks for a short and an absurd Crawl-delay (per host below)."""
    if path == "/robots.txt":
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ROBOTS_DELAY), ROBOTS_DELAY
    number = int(path.strip("/") or 0)
    body = b"<html><body><a href='/%d'>next</a></body></html>" % (number + 1) if number < 4 else b"<html></html>"
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body), body


ROBOTS_DELAY = b"User-agent: *\nCrawl-delay: 0.3\n\nUser-agent: weblm-spider\nCrawl-delay: 1000\n"


def test_crawl_delay_is_obeyed_up_to_its_cap(tmp_path, raw_server):
    server = raw_server(_delay_site)
    cap = 0.6
    run = run_crawl(["http://delay.weblm.test/"], tmp_path,
                    ["proxy=" + server.proxy_url(), "download_delay_s=0.01", "randomize_delay=true",
                     f"max_crawl_delay_s={cap}"])
    assert run.returncode == 0, run.log[-3000:]
    pages = [at for at, _, path in server.arrivals if path != "/robots.txt"]
    assert len(pages) == 5
    gaps = [b - a for a, b in zip(pages, pages[1:])]
    # our agent's group (Crawl-delay 1000) wins over '*', capped; no jitter may take it below the cap
    assert min(gaps) >= cap * 0.95, gaps
    assert max(gaps) < cap * 10, gaps  # the cap, not 1000 s (room left for a loaded machine)
    assert run.stats["scrapy"]["weblm/robots/crawl_delay_hosts"] == 1
    assert "capped at crawl.max_crawl_delay_s" in run.log
