"""robots.txt that cannot be fetched at all: RFC 9309 §2.3.1.4 says assume complete disallow.

The host's server closes the connection unanswered whenever robots.txt is asked for; its pages
would answer.  Stock Scrapy would crawl them without rules (fail open).
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
