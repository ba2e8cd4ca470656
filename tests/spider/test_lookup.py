"""`python -m spider.lookup`: where URLs stand in a crawl's frontier, embedded or on Redis, however they are spelled,
and what keeps a URL that was never admitted out of it."""
from __future__ import annotations

import json
import time

import pytest

from spider.config import load_crawl_config
from spider.frontier import open_backend
from spider.frontier.backend import NewUrl, RobotsRecord
from spider.frontier.bloom import url_hashes
from spider.frontier.canonical import Canonicalizer
from spider.lookup import main


@pytest.fixture(params=["embedded", "redis"])
def frontier_url(request, tmp_path):
    if request.param == "embedded":
        yield f"sqlite:///{tmp_path / 'frontier.db'}"
        return
    from tests.support.redisserver import RedisServer
    server = RedisServer(tmp_path / "redis")
    try:
        yield server.url
    finally:
        server.stop()


def new_url(url: str, priority: int = 0) -> NewUrl:
    key = Canonicalizer([]).key(url)
    return NewUrl(key.hex(), url.split("/")[2], url, priority, json.dumps({"url": url}), url_hashes(key))


def looked_up(capsys, frontier_url: str, *urls: str) -> dict:
    assert main(["--json", "-o", f"frontier.url={frontier_url}", "-o", "max_pages_per_host=3", *urls]) == 0
    return {found["url"]: found for found in map(json.loads, capsys.readouterr().out.splitlines())}


def test_each_url_is_found_however_spelled_and_a_refused_one_says_why(frontier_url, tmp_path, capsys):
    cfg = load_crawl_config([f"frontier.url={frontier_url}"])
    backend = open_backend(cfg, str(tmp_path))
    now = time.time()
    try:
        backend.scope_add(["a.weblm.test", "full.weblm.test"])
        backend.add([new_url("http://a.weblm.test/seed", 5), new_url("http://a.weblm.test/page?x=1&y=2"),
                     *(new_url(f"http://full.weblm.test/{i}") for i in range(3))], now, 0)
        backend.robots_put("a.weblm.test", RobotsRecord("parsed", b"User-agent: *\nDisallow: /private\n", now,
                                                        now + 86400, "HTTP 200"))
        (leased,) = [item for item in backend.lease(10, now, 600) if item.host == "a.weblm.test"]
    finally:
        backend.close()

    asked = ["HTTP://A.weblm.test/page?y=2&x=1&utm_source=mail#top", "http://a.weblm.test/seed",
             "http://a.weblm.test/private/x", "http://elsewhere.test/", "http://full.weblm.test/new",
             "ftp://a.weblm.test/file", "http://a.weblm.test/unlinked"]
    found = looked_up(capsys, frontier_url, *asked)
    page, seed, private, offsite, over, ftp, unlinked = (found[u] for u in asked)
    assert page["canonical"] == "http://a.weblm.test/page?x=1&y=2"      # the tracking parameter dropped
    assert (page["state"], page["ahead"], page["host_busy"], page["seen"]) == ("queued", 0, True, True)
    assert seed["state"] == "leased" and seed["owner"] and seed["until"] == pytest.approx(now + 600, abs=0.01)
    assert leased.id == seed["id"]
    assert private["refused_by"] == [private["refused_by"][0]] and private["refused_by"][0].startswith(
        "robots.txt: disallowed")
    assert offsite["refused_by"] == ["scope: its host is not in the crawl's scope (not a seed's host nor in "
                                     "allowed_hosts)"]
    assert over["refused_by"] == ["host budget: 3 URLs admitted, max_pages_per_host 3"]
    assert "admission: scheme" in ftp["refused_by"]
    assert unlinked["refused_by"] == [] and not unlinked["seen"] and unlinked["state"] is None

    malformed = ["http://[::1/x", "http://a.weblm.test:99999/"]
    listed = tmp_path / "urls.txt"
    listed.write_text("# asked by file\n" + "\n".join(malformed) + "\n")
    assert main(["-o", f"frontier.url={frontier_url}", asked[0], asked[6], "--urls", str(listed)]) == 0
    text = capsys.readouterr().out
    assert "queued, 0 URL(s) of a.weblm.test before it" in text and "a fetch in flight" in text
    assert "nothing here refuses it" in text
    assert text.count("not a URL the crawl can fetch") == 2


def test_no_frontier_is_said_and_none_is_made(tmp_path, capsys):
    assert main(["-o", f"frontier.url=sqlite:///{tmp_path / 'f.db'}"]) == 2
    assert "name at least one URL (or --urls FILE)" in capsys.readouterr().err
    missing = tmp_path / "none" / "frontier.db"
    assert main(["-o", f"frontier.url=sqlite:///{missing}", "http://a.weblm.test/"]) == 1
    err = capsys.readouterr().err
    assert "spider.lookup: no frontier at " in err and str(missing) in err
    assert not missing.exists()
