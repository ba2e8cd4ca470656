"""The crawl asks each host for its site-wide TDMRep file (/.well-known/tdmrep.json, frontier.tdmrep) once, archives
the answer like any fetch for extract to read (tdmrep/), follows no links from it, and counts a host that declares
nothing (a 404) without calling it an error.  With `respect` (the default) the file is asked right after robots.txt,
before any page of its host, and the pages it reserves are never fetched; with `archive` every page is."""
from __future__ import annotations

import json
import sqlite3
import subprocess

import redis

from crawl_helpers import ROOT, crawl_command, env, finished, read_warc

RULES = json.dumps([{"location": "/*", "tdm-reservation": 1}]).encode()


def _site(files: dict[str, tuple[bytes, bytes]], links: bytes, robots: bytes | None = None):
    """Each host: robots.txt 404 (or `robots`), its tdmrep.json from `files` (else a 404), and pages that link to
    `links`."""
    def answer(host: str, path: str):
        if path == "/robots.txt":
            if robots is not None:
                return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(robots), robots
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
        if path == "/.well-known/tdmrep.json":
            return files.get(host, (b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: 9\r\n\r\n",
                                    b"Not found"))
        page = f"{host}{path}".encode()   # each page its own body: the same one twice would be a revisit record
        body = b"<html><body><p>%s</p>%s</body></html>" % (page, links)
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body), body
    return answer


def _json(body: bytes) -> tuple[bytes, bytes]:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body), body


def test_archive_asks_each_host_for_its_tdmrep_file_once_archives_it_and_fetches_every_page(tmp_path, raw_server):
    server = raw_server(_site({"reserved.weblm.test": _json(RULES)}, b"<a href='/next'>next</a> <a href='/'>home</a>"),
                        by_host=True)
    seeds = ["http://reserved.weblm.test/", "http://open.weblm.test/"]
    cmd = crawl_command(seeds, tmp_path, ["proxy=" + server.proxy_url(), "frontier.tdmrep=archive"])
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


LICENCE = "https://reserved.weblm.test/licence.json"
PARTLY = json.dumps([{"location": "/private/*", "tdm-reservation": 1, "tdm-policy": LICENCE},
                     {"location": "/*", "tdm-reservation": 0}])


def _stored_file(tmp_path, frontier: list[str], host: str) -> bytes | None:
    """The tdmrep.json the frontier keeps in `host`'s robots.txt record, for the whole cluster."""
    if not frontier:
        with sqlite3.connect(tmp_path / "frontier.db") as db:
            return db.execute("SELECT tdm FROM robots WHERE host = ?", (host,)).fetchone()[0]
    client = redis.Redis.from_url(frontier[0].split("=", 1)[1])
    (key,) = [k for k in client.scan_iter(match=f"*r:{host}")]
    return client.hget(key, "tdm")


def test_respect_asks_for_the_file_before_any_page_and_leaves_the_reserved_pages_unfetched(tmp_path, raw_server,
                                                                                           frontier):
    busy = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\n", b"busy"
    server = raw_server(_site({"reserved.weblm.test": _json(PARTLY.encode()), "down.weblm.test": busy},
                              b"<a href='/private/a'>a</a> <a href='/public/b'>b</a>"), by_host=True)
    hosts = ["reserved.weblm.test", "open.weblm.test", "down.weblm.test"]
    seeds = [f"http://{h}/" for h in hosts] + ["http://reserved.weblm.test/private/seed"]
    cmd = crawl_command(seeds, tmp_path, ["proxy=" + server.proxy_url(), "frontier.tdmrep=respect", *frontier])
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
    run = finished(proc.returncode, tmp_path, proc.stdout + proc.stderr)
    assert run.returncode == 0, run.log[-3000:]
    for host in hosts:   # robots.txt, then the file, then the pages
        paths = [path for _, h, path in sorted(server.arrivals) if h == host]
        assert paths[:2] == ["/robots.txt", "/.well-known/tdmrep.json"], (host, paths)
        assert paths.count("/.well-known/tdmrep.json") == 1 and "/public/b" in paths, (host, paths)
    reserved = {path for _, h, path in server.arrivals if h == "reserved.weblm.test"}
    assert not {p for p in reserved if p.startswith("/private/")}, reserved   # neither the seed nor the link
    # nothing reserved where there is no file, or where it could not be read
    assert {("open.weblm.test", "/private/a"), ("down.weblm.test", "/private/a")} <= {
        (h, path) for _, h, path in server.arrivals}
    stats = run.stats["scrapy"]
    assert (stats["weblm/tdmrep/asked"], stats["weblm/tdmrep/found"], stats["weblm/tdmrep/absent"],
            stats["weblm/tdmrep/unreachable"]) == (3, 1, 1, 1)
    assert stats["weblm/tdmrep/reserved"] >= 2   # the leased seed, and each link to /private/a once rules are known
    assert not any(k.startswith("weblm/errors/") for k in stats), stats
    assert "tdmrep.json for down.weblm.test could not be read (HTTP 503)" in run.log
    said = "tdmrep.json for reserved.weblm.test reserves text and data mining on /private/*; licence policy: "
    assert said + LICENCE in run.log
    # archived like any fetch, for the lake
    archived = {r["headers"].get_header("WARC-Target-URI"): r for path in run.warc_files for r in read_warc(path)
                if r["type"] == "response"}
    assert archived["http://reserved.weblm.test/.well-known/tdmrep.json"]["raw"] == PARTLY.encode()
    assert archived["http://down.weblm.test/.well-known/tdmrep.json"]["http"].get_statuscode() == "503"
    assert not [url for url in archived if "/private/" in url and "reserved.weblm.test" in url]
    # the file rides in the host's robots.txt record, for every worker of the cluster
    assert _stored_file(tmp_path, frontier, "reserved.weblm.test") == PARTLY.encode()
    assert _stored_file(tmp_path, frontier, "open.weblm.test") == b""


def test_without_obeying_robots_txt_the_file_is_still_asked_first_and_respected(tmp_path, raw_server, frontier):
    links, robots = b"<a href='/private/a'>a</a> <a href='/public/b'>b</a>", b"User-agent: *\nDisallow: /"
    server = raw_server(_site({"reserved.weblm.test": _json(PARTLY.encode())}, links, robots), by_host=True)
    hosts = ["reserved.weblm.test", "open.weblm.test"]
    cmd = crawl_command([f"http://{h}/" for h in hosts], tmp_path,
                        ["proxy=" + server.proxy_url(), "obey_robots=false", "frontier.tdmrep=respect", *frontier])
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
    run = finished(proc.returncode, tmp_path, proc.stdout + proc.stderr)
    assert run.returncode == 0, run.log[-3000:]
    for host in hosts:   # the file first, robots.txt never, and the pages robots.txt disallows are fetched
        paths = [path for _, h, path in sorted(server.arrivals) if h == host]
        assert paths[0] == "/.well-known/tdmrep.json" and paths.count(paths[0]) == 1, (host, paths)
        assert "/robots.txt" not in paths and "/public/b" in paths, (host, paths)
    assert "/private/a" not in {path for _, h, path in server.arrivals if h == "reserved.weblm.test"}
    assert ("open.weblm.test", "/private/a") in {(h, path) for _, h, path in server.arrivals}
    stats = run.stats["scrapy"]
    assert (stats["weblm/tdmrep/asked"], stats["weblm/tdmrep/found"], stats["weblm/tdmrep/absent"]) == (2, 1, 1)
    assert stats["weblm/robots/not_asked"] == 2 and "weblm/robots/fetches" not in stats
    assert stats["weblm/tdmrep/reserved"] >= 1 and "weblm/robots_denied" not in stats
    assert _stored_file(tmp_path, frontier, "reserved.weblm.test") == PARTLY.encode()
