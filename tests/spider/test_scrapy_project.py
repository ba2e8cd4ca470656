"""`scrapy crawl weblm` (scrapy.cfg) runs the same crawl as `python -m spider.crawl`:
conf/ settings with overlays, WARC files, and the crawl counters file."""
from __future__ import annotations

import json
import subprocess
import sys


from crawl_helpers import ROOT, env, read_warc

PAGES = {"/": b"<html><body><a href='/a'>a</a> <a href='/private/x'>x</a></body></html>",
         "/a": b"<html><body><a href='/'>home</a></body></html>",
         "/robots.txt": b"User-agent: *\nDisallow: /private/\n"}


def _answer(path: str):
    body = PAGES.get(path)
    if body is None:
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
    kind = b"text/plain" if path.endswith(".txt") else b"text/html"
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (kind, len(body)), body



def test_scrapy_crawl_uses_the_project_settings(tmp_path, raw_server):
    server = raw_server(_answer)
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"crawl:\n  proxy: {server.proxy_url()}\n  download_delay_s: 0.01\n"
                       f"  randomize_delay: false\n  frontier:\n    url: sqlite:///{tmp_path / 'frontier.db'}\n"
                       f"    ssrf_allow: [127.0.0.1]\n")
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://project.weblm.test/\n")
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "weblm", "-a", f"seeds={seeds}",
         "-s", f"WEBLM_WARC_DIR={tmp_path / 'warc'}", "-s", f"WEBLM_STATS_FILE={tmp_path / 'stats.json'}"],
        cwd=ROOT / "spider", env={**env(), "WEBLM_CONF_OVERLAY": str(overlay)},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]

    stats = json.loads((tmp_path / "stats.json").read_text())
    # robots.txt, / and /a, and the site-wide TDMRep file conf/crawl.yaml asks for (404 here: nothing declared)
    assert stats["pages_fetched"] == 4
    assert stats["robots_denied"] == 1  # /private/x
    assert stats["seeds"] == 1
    assert set(server.received) == {"/robots.txt", "/", "/a", "/.well-known/tdmrep.json"}
    assert stats["scrapy"]["weblm/tdmrep/absent"] == 1 and not any(k.startswith("weblm/errors/") for k in stats["scrapy"])
    records = [r for path in sorted((tmp_path / "warc").glob("*.warc.gz")) for r in read_warc(path)]
    responses = [r for r in records if r["type"] == "response"]
    assert len(responses) == 4 and all(r["digest_ok"] for r in responses)
    assert records[0]["type"] == "warcinfo"
