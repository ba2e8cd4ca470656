"""A crawl resumes where its frontier stopped; `--fresh-frontier` starts over."""
from __future__ import annotations

import subprocess

from crawl_helpers import ROOT, crawl_command, env, finished

PAGE = b"<html><body><a href='/a'>a</a> <a href='/b'>b</a></body></html>"


def _site(path: str):
    if path == "/robots.txt":
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(PAGE), PAGE


def _crawl(tmp, server, *extra: str):
    cmd = crawl_command(["http://resume.weblm.test/"], tmp, ["proxy=" + server.proxy_url()]) + list(extra)
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
    return finished(proc.returncode, tmp, proc.stdout + proc.stderr)


def test_a_second_crawl_resumes_and_fresh_frontier_starts_over(tmp_path, raw_server):
    server = raw_server(_site)
    first = _crawl(tmp_path, server)
    assert first.returncode == 0 and first.stats["pages_fetched"] == 4  # robots.txt, /, /a, /b
    again = _crawl(tmp_path, server)
    assert again.returncode == 0, again.log[-3000:]
    assert again.stats["pages_fetched"] == 0  # everything was fetched; the recrawl is 30 days away
    assert again.stats["filtered"].get("seen") == 1  # the seed, offered again
    fresh = _crawl(tmp_path, server, "--fresh-frontier")
    assert fresh.returncode == 0, fresh.log[-3000:]
    assert "cleared" in fresh.log and fresh.stats["pages_fetched"] == 4
