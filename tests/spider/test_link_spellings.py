"""Links as pages write them: a default port (`http://host:80/x`) is the same URL as without it, so the page and
its host's robots.txt are fetched once; a link whose port is not a port (out of range, not a number) is left out by
Scrapy's link extractor, and the page's other links are still followed."""
from __future__ import annotations

from crawl_helpers import run_crawl

LINKS = ("http://ports.weblm.test:80/same", "/same", "http://ports.weblm.test:99999/big",
         "http://ports.weblm.test:abc/word", "/after")


def answer(host: str, path: str):
    if path == "/robots.txt":
        body, kind = b"User-agent: *\nDisallow:\n", "text/plain"
    else:
        anchors = "".join(f"<a href='{href}'>{href}</a> " for href in (LINKS if path == "/" else ()))
        body, kind = f"<html><body><p>A page.</p>{anchors}</body></html>".encode(), "text/html"
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode(), body


def test_a_default_port_is_fetched_once_and_a_bad_port_costs_no_other_link(tmp_path, raw_server):
    server = raw_server(answer, by_host=True)
    run = run_crawl(["http://ports.weblm.test/"], tmp_path, ["proxy=" + server.proxy_url()])
    assert run.returncode == 0, run.log[-3000:]
    assert "Traceback" not in run.log, run.log[-3000:]
    assert sorted(path for _, _, path in server.arrivals) == ["/", "/after", "/robots.txt", "/same"]
    assert run.stats["scrapy"]["weblm/filtered/seen"] == 1       # /same, spelled with :80 or not
