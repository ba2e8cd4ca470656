"""The crawl asks each host for its site-wide TDMRep file (/.well-known/tdmrep.json, frontier.tdmrep) once, archives
the answer like any fetch for extract to read (jobs/text/tdmrep.py), follows no links from it, and counts a host that
declares nothing (a 404) without calling it an error."""
from __future__ import annotations

import json
import subprocess

from crawl_helpers import ROOT, crawl_command, env, finished, read_warc

RULES = json.dumps([{"location": "/*", "tdm-reservation": 1}]).encode()


def _answer(host: str, path: str):
    if path == "/robots.txt":
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
    if path == "/.well-known/tdmrep.json":
        if host == "reserved.weblm.test":
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            return head % len(RULES), RULES
        return b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 9\r\n\r\n", b"Not found"
    page = f"{host}{path}".encode()   # each page its own body: the same one twice would be a revisit record
    body = b"<html><body><p>%s</p><a href='/next'>next</a> <a href='/'>home</a></body></html>" % page
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body), body


def test_each_host_is_asked_for_its_tdmrep_file_once_and_the_answer_is_archived(tmp_path, raw_server):
    server = raw_server(_answer, by_host=True)
    seeds = ["http://reserved.weblm.test/", "http://open.weblm.test/"]
    cmd = crawl_command(seeds, tmp_path, ["proxy=" + server.proxy_url(), "frontier.tdmrep=true"])
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
    run = finished(proc.returncode, tmp_path, proc.stdout + proc.stderr)
    assert run.returncode == 0, run.log[-3000:]
    asked = [(host, path) for _, host, path in server.arrivals if path == "/.well-known/tdmrep.json"]
    assert sorted(asked) == [("open.weblm.test", "/.well-known/tdmrep.json"),
                             ("reserved.weblm.test", "/.well-known/tdmrep.json")]
    stats = run.stats["scrapy"]
    assert (stats["weblm/tdmrep/asked"], stats["weblm/tdmrep/found"], stats["weblm/tdmrep/absent"]) == (2, 1, 1)
    assert not any(k.startswith("weblm/errors/") for k in stats), stats
    archived = {r["headers"].get_header("WARC-Target-URI"): r for path in run.warc_files for r in read_warc(path)
                if r["type"] == "response"}
    kept = archived["http://reserved.weblm.test/.well-known/tdmrep.json"]
    assert kept["http"].get_statuscode() == "200" and kept["raw"] == RULES
    assert archived["http://open.weblm.test/.well-known/tdmrep.json"]["http"].get_statuscode() == "404"
    # the pages are crawled as before (the reservation is the lake's to apply, not the crawl's)
    assert {"http://reserved.weblm.test/next", "http://open.weblm.test/next"} <= set(archived)
