"""Sitemaps (sitemaps.org) found through robots.txt: the frontier queues the files robots.txt lists, the spider reads
them (an index, a gzipped file, a relative line) and follows their URLs as links, so that pages no link reaches are
crawled; scope, robots rules, dedup and the per-file URL cap apply; a broken file or a gzip bomb is counted and left.

One crawl over a proxy answering for every host: maps.weblm.test lists an index, a file that is not XML and a gzip
bomb; many.weblm.test lists one file of 30 URLs, over a cap of 10.
"""
from __future__ import annotations

import gzip
import json
import sqlite3
import time

import pytest

from crawl_helpers import read_warc, run_crawl

PAGE = b"<html><body><p>A page.</p></body></html>"
HOME = b"<html><body><a href='/a'>a</a></body></html>"


XML = '<?xml version="1.0" encoding="UTF-8"?>\n<{0} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{1}</{0}>'


def urlset(*locs: str) -> bytes:
    return XML.format("urlset", "".join(f"<url><loc>{loc}</loc><lastmod>2026-11-01</lastmod></url>"
                                        for loc in locs)).encode()


def index(*locs: str) -> bytes:
    return XML.format("sitemapindex", "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)).encode()


MAPS = "http://maps.weblm.test"
FILES = {
    ("maps", "/robots.txt"): (b"User-agent: *\nDisallow: /private/\nSitemap: http://maps.weblm.test/sitemap_index.xml\n"
                              b"Sitemap: /broken.xml\nSitemap: http://maps.weblm.test/bomb.xml.gz\n", b"text/plain"),
    ("maps", "/sitemap_index.xml"): (index(f"{MAPS}/sitemap-a.xml", f"{MAPS}/sitemap-b.xml.gz"), b"application/xml"),
    ("maps", "/sitemap-a.xml"): (urlset(f"{MAPS}/orphan1", f"{MAPS}/orphan2", "http://elsewhere.weblm.test/x",
                                        f"{MAPS}/a", f"{MAPS}/orphan1#top"), b"application/xml"),
    ("maps", "/sitemap-b.xml.gz"): (gzip.compress(urlset(f"{MAPS}/orphan3", f"{MAPS}/private/secret")),
                                    b"application/x-gzip"),
    ("maps", "/broken.xml"): (bytes(range(256)) * 8, b"application/xml"),
    ("maps", "/bomb.xml.gz"): (gzip.compress(b"<urlset>" + b" " * 2_000_000), b"application/x-gzip"),  # 2 MB unpacked
    ("many", "/robots.txt"): (b"User-agent: *\nDisallow:\nSitemap: http://many.weblm.test/pages.xml\n", b"text/plain"),
    ("many", "/pages.xml"): (urlset(*(f"http://many.weblm.test/p{i}" for i in range(30))), b"text/xml"),
}


def answer(host: str, path: str):
    body, kind = FILES.get((host.split(".")[0], path), (HOME if path == "/" else PAGE, b"text/html"))
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (kind, len(body)), body


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    from rawhttp import RawHttpServer
    server = RawHttpServer(answer, by_host=True)
    tmp = tmp_path_factory.mktemp("sitemaps")
    try:
        run = run_crawl([f"{MAPS}/", "http://many.weblm.test/"], tmp,
                        ["proxy=" + server.proxy_url(), "frontier.sitemap_max_urls=10",
                         "frontier.sitemap_max_bytes=1000000"], timeout=120)
    finally:
        server.close()
    assert run.returncode == 0, run.log[-3000:]
    fetched: dict[str, list[str]] = {}
    for _, host, path in server.arrivals:
        fetched.setdefault(host.split(".")[0], []).append(path)
    return run, fetched, tmp


MAPS_FETCHED = {"/robots.txt", "/", "/a", "/orphan1", "/orphan2", "/orphan3",
                "/sitemap_index.xml", "/sitemap-a.xml", "/sitemap-b.xml.gz", "/broken.xml", "/bomb.xml.gz"}


def test_pages_only_a_sitemap_names_are_crawled_within_scope_and_robots_rules(crawled):
    run, fetched, _ = crawled
    assert sorted(fetched["maps"]) == sorted(MAPS_FETCHED)
    assert "elsewhere" not in fetched                                   # off the crawl's hosts: not followed
    assert "/private/secret" not in fetched["maps"]                     # listed, but robots.txt disallows it
    assert len(fetched["maps"]) == len(set(fetched["maps"]))            # /a and /orphan1#top: each fetched once


def test_a_sitemap_past_its_url_cap_is_followed_up_to_the_cap(crawled):
    run, fetched, _ = crawled
    assert sorted(p for p in fetched["many"] if p[2:].isdigit()) == sorted(f"/p{i}" for i in range(10))
    assert "sitemap http://many.weblm.test/pages.xml lists more than 10 URLs" in run.log


def test_sitemaps_are_counted_and_a_broken_one_or_a_bomb_is_left_with_a_message(crawled):
    run, _, _ = crawled
    scrapy = run.stats["scrapy"]
    assert scrapy["weblm/sitemaps/listed"] == 4          # robots.txt lines: three of maps, one of many
    assert scrapy["weblm/sitemaps/indexes"] == 1
    assert scrapy["weblm/sitemaps/read"] == 3            # sitemap-a, sitemap-b.xml.gz, pages.xml
    assert scrapy["weblm/sitemaps/urls"] == 2 + 5 + 2 + 10
    assert scrapy["weblm/sitemaps/urls_over_limit"] == 1
    assert scrapy["weblm/sitemaps/invalid"] == 2
    assert "sitemap http://maps.weblm.test/broken.xml not read" in run.log
    assert "sitemap http://maps.weblm.test/bomb.xml.gz not read" in run.log
    assert "Traceback" not in run.log


def test_a_page_found_through_a_sitemap_names_it_in_its_warc_metadata(crawled):
    run, _, _ = crawled
    via = {}
    for path in run.warc_files:
        for record in read_warc(path):
            if record["type"] == "metadata":
                fields = dict(line.split(": ", 1) for line in record["raw"].decode().splitlines() if ": " in line)
                via[record["headers"].get_header("WARC-Target-URI")] = (fields.get("via"), fields.get("depth"))
    assert via[f"{MAPS}/orphan3"] == (f"{MAPS}/sitemap-b.xml.gz", "3")   # robots.txt -> index -> sitemap -> page
    assert via[f"{MAPS}/sitemap-b.xml.gz"] == (f"{MAPS}/sitemap_index.xml", "2")
    assert via[f"{MAPS}/sitemap_index.xml"] == (f"{MAPS}/robots.txt", "1")


def test_with_sitemaps_off_only_links_are_followed(tmp_path, raw_server):
    server = raw_server(answer, by_host=True)
    run = run_crawl([f"{MAPS}/"], tmp_path, ["proxy=" + server.proxy_url(), "frontier.sitemaps=false"])
    assert run.returncode == 0, run.log[-3000:]
    assert sorted(path for _, _, path in server.arrivals) == ["/", "/a", "/robots.txt"]
    assert not any(key.startswith("weblm/sitemaps/") for key in run.stats["scrapy"])


def test_sitemaps_come_back_as_often_as_seeds_and_their_pages_as_other_pages(crawled):
    _, _, tmp = crawled
    with sqlite3.connect(tmp / "frontier.db") as db:   # the crawl's embedded frontier: when each URL is due again
        due = {json.loads(payload)["url"]: until for payload, until in
               db.execute("SELECT payload, until FROM urls WHERE state = 'due'")}
    day, month = 86400, 2592000   # conf/crawl.yaml frontier.hot_recrawl_after_s, recrawl_after_s
    now = time.time()
    hot_urls = (f"{MAPS}/", f"{MAPS}/sitemap_index.xml", f"{MAPS}/sitemap-b.xml.gz", "http://many.weblm.test/pages.xml")
    for hot in hot_urls:
        assert now < due[hot] <= now + day, hot
    for page in (f"{MAPS}/orphan1", f"{MAPS}/a"):
        assert now + day < due[page] <= now + month, page


def test_a_crawl_over_redis_follows_sitemaps_the_same_way(tmp_path, raw_server):
    from tests.support.redisserver import RedisServer

    server, redis = raw_server(answer, by_host=True), RedisServer(tmp_path / "redis")
    try:
        run = run_crawl([f"{MAPS}/"], tmp_path, ["proxy=" + server.proxy_url(), f"frontier.url={redis.url}",
                                                "frontier.sitemap_max_bytes=1000000"])
    finally:
        redis.stop()
    assert run.returncode == 0, run.log[-3000:]
    assert sorted(path for _, _, path in server.arrivals) == sorted(MAPS_FETCHED)
