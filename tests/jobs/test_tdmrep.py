"""TDMRep's site-wide file (/.well-known/tdmrep.json): its rules read in order, robots.txt-style locations, the first
match deciding; and the extract job joining each origin's latest answer to the origin's pages in silver.documents."""
from __future__ import annotations

import json
import shutil
import pytest
from deltalake import DeltaTable

from conftest import PAGES, Page, write_warc
from tdmrep import parse_rules, reserved

RULES = json.dumps([
    {"location": "/news/free-*", "tdm-reservation": 0},
    {"location": "/news/*", "tdm-reservation": 1, "tdm-policy": "https://pub.example/policies/tdm.json"},
    {"location": "/exact$", "tdm-reservation": 1},
    {"location": "/café/*", "tdm-reservation": "1"},
    {"location": "/odd/*", "tdm-reservation": 2},      # a protocol error: unset, and it still decides first
    {"location": "/*", "tdm-reservation": 0},
]).encode()


@pytest.mark.parametrize("url, expected", [
    ("https://pub.example/news/2026/story", True),
    ("https://pub.example/news/free-story", False),      # the first rule in sequence wins
    ("https://pub.example/exact", True),
    ("https://pub.example/exact/more", False),           # `$` ends the pattern
    ("https://pub.example/caf%C3%A9/menu", True),        # percent-escapes decoded before comparing
    ("https://pub.example/odd/page", False),
    ("https://pub.example/blog/post", False),
    ("https://pub.example/", False),
])
def test_the_first_matching_rule_decides(url, expected):
    assert reserved(RULES, url) is expected


def test_files_that_declare_nothing_reserve_nothing():
    for body in (None, b"", b"not json", b'{"location": "/*", "tdm-reservation": 1}', b"[1, 2]", b"\xff[]",
                 b"[" * 100_000, json.dumps([{"tdm-reservation": 1}]).encode()):
        assert reserved(body, "https://pub.example/news/x") is False, body
    assert parse_rules(b"{}") is None and parse_rules(b"[]") == ()
    assert reserved(json.dumps([{"location": "/", "tdm-reservation": 1}]).encode(), "https://pub.example/a/b")


def test_extract_reads_each_hosts_latest_file_into_opt_out(spark, tmp_path):
    from jobs.extract import ExtractJob
    from jobs.ingest import IngestJob

    warc, lake = tmp_path / "warc", tmp_path / "lake"
    warc.mkdir()
    html, kind = PAGES[0].body, "text/html; charset=utf-8"
    reserve_all = json.dumps([{"location": "/*", "tdm-reservation": 1}]).encode()
    write_warc(warc / "a.warc.gz", [
        Page("http://pub.weblm.test/.well-known/tdmrep.json", 200, "application/json", RULES),
        Page("http://pub.weblm.test/news/story", 200, kind, html),
        Page("http://pub.weblm.test/news/free-story", 200, kind, html),
        Page("http://pub.weblm.test/about", 200, kind, html),
        Page("http://none.weblm.test/.well-known/tdmrep.json", 404, "text/html", b"<html>Not found</html>"),
        Page("http://none.weblm.test/page", 200, kind, html),
        Page("http://broken.weblm.test/.well-known/tdmrep.json", 200, "application/json", b"[{oops"),
        Page("http://broken.weblm.test/page", 200, kind, html),
        # reserved everywhere once, then the file went away (404): its latest answer decides
        Page("http://lifted.weblm.test/.well-known/tdmrep.json", 200, "application/json", reserve_all,
             date="2026-01-01T00:00:00Z"),
        Page("http://lifted.weblm.test/.well-known/tdmrep.json", 404, "text/html", b"gone",
             date="2026-01-31T00:00:00Z"),
        Page("http://lifted.weblm.test/page", 200, kind, html),
        Page("https://pub.weblm.test/news/story", 200, kind, html),   # another origin: the file does not speak for it
        # a server error after the file says nothing: the file before it stands
        Page("http://busy.weblm.test/.well-known/tdmrep.json", 200, "application/json", reserve_all,
             date="2026-01-01T00:00:00Z"),
        Page("http://busy.weblm.test/.well-known/tdmrep.json", 503, "text/html", b"busy",
             date="2026-01-31T00:00:00Z"),
        Page("http://busy.weblm.test/page", 200, kind, html),
        # the file's place redirects: to another path of the host (relative), and to another host
        Page("http://moved.weblm.test/.well-known/tdmrep.json", 301, "text/html", b"moved",
             headers=(("Location", "/policies/tdm.json"),)),
        Page("http://moved.weblm.test/policies/tdm.json", 200, "application/json", reserve_all),
        Page("http://moved.weblm.test/page", 200, kind, html),
        Page("http://hop.weblm.test/.well-known/tdmrep.json", 302, "text/html", b"found",
             headers=(("Location", "http://cdn.weblm.test/hop.json"),)),
        Page("http://cdn.weblm.test/hop.json", 200, "application/json", reserve_all),
        Page("http://hop.weblm.test/page", 200, kind, html),
        Page("http://cdn.weblm.test/page", 200, kind, html),   # the file speaks for the host that sent there
    ])
    IngestJob().run(["--lake", str(lake), "-p", f"warc_dir={warc}"])
    # ingest keeps the hosts' files apart (extract joins them without scanning every page's html)
    sites = DeltaTable(str(lake / "bronze" / "site_files")).to_pyarrow_table().to_pylist()
    assert sorted((r["url"].split("/")[2], r["status"]) for r in sites) == [
        ("broken.weblm.test", 200), ("busy.weblm.test", 200), ("busy.weblm.test", 503),
        ("hop.weblm.test", 200), ("lifted.weblm.test", 200), ("lifted.weblm.test", 404),
        ("moved.weblm.test", 200), ("none.weblm.test", 404), ("pub.weblm.test", 200)]
    assert ExtractJob().run(["--lake", str(lake)]).status == "ok"
    table = DeltaTable(str(lake / "silver" / "documents")).to_pyarrow_table().to_pylist()
    assert {r["url"]: r["opt_out"] for r in table} == {
        "http://pub.weblm.test/news/story": "tdmrep.json",
        "http://pub.weblm.test/news/free-story": None,
        "http://pub.weblm.test/about": None,
        "http://none.weblm.test/page": None,
        "http://broken.weblm.test/page": None,
        "http://lifted.weblm.test/page": None,
        "http://busy.weblm.test/page": "tdmrep.json",
        "https://pub.weblm.test/news/story": None,
        "http://moved.weblm.test/page": "tdmrep.json",
        "http://hop.weblm.test/page": "tdmrep.json",
        "http://cdn.weblm.test/page": None}
    # the report names the hosts that reserve, what, how many documents it cost and the licence policy they give
    from conf.paths import load_paths
    from jobs.config import load_jobs_config
    from jobs.report import Lake, tdm_reservations

    from jobs.report_html import reservations_table

    rows = tdm_reservations(Lake(spark, load_jobs_config(), load_paths([f"lake={lake}"])))
    table = reservations_table({"tdm_reservations": rows})   # the report page's section
    assert "<td>http://pub.weblm.test</td><td>1</td><td>/news/*, /exact$, /café/*</td>" in table
    assert "https://pub.example/policies/tdm.json" in table and "none given" in table
    assert rows == [
        {"origin": "http://busy.weblm.test", "documents": 1, "locations": ["/*"], "policies": []},
        {"origin": "http://hop.weblm.test", "documents": 1, "locations": ["/*"], "policies": []},
        {"origin": "http://moved.weblm.test", "documents": 1, "locations": ["/*"], "policies": []},
        {"origin": "http://pub.weblm.test", "documents": 1, "locations": ["/news/*", "/exact$", "/café/*"],
         "policies": ["https://pub.example/policies/tdm.json"]}]   # most documents first, then by origin

    # a lake ingested before bronze.site_files existed: the next ingest builds it from all of bronze.pages once
    shutil.rmtree(lake / "bronze" / "site_files")
    write_warc(warc / "b.warc.gz", [Page("http://late.weblm.test/page", 200, kind, html)])
    IngestJob().run(["--lake", str(lake), "-p", f"warc_dir={warc}"])
    rebuilt = DeltaTable(str(lake / "bronze" / "site_files")).to_pyarrow_table().to_pylist()
    assert sorted(r["doc_id"] for r in rebuilt) == sorted(r["doc_id"] for r in sites)


def test_a_file_that_changes_later_re_flags_the_pages_already_in_silver(spark, tmp_path):
    """A host reserves its news after its pages were extracted, then lifts the reservation: each incremental extract
    applies the file's latest answer to the pages already in silver, without extracting them again; a page's own
    flag (its meta robots) stands; a run with nothing new changes nothing."""
    from jobs.extract import ExtractJob
    from jobs.ingest import IngestJob

    warc, lake = tmp_path / "warc", tmp_path / "lake"
    warc.mkdir()
    html, kind = PAGES[0].body, "text/html; charset=utf-8"
    noai = html.replace(b"<head>", b"<head><meta name='robots' content='noai'>", 1)
    assert noai != html
    news = json.dumps([{"location": "/news/*", "tdm-reservation": 1}]).encode()
    absent = (404, "text/html", b"Not found")

    def crawl(name: str, date: str, answer: tuple, pages: list[str]) -> dict:
        write_warc(warc / f"{name}.warc.gz", [
            Page("http://pub.weblm.test/.well-known/tdmrep.json", *answer, date=date),
            *[Page(f"http://pub.weblm.test{path}", 200, kind, noai if path == "/news/own" else html, date=date)
              for path in pages]])
        IngestJob().run(["--lake", str(lake), "-p", f"warc_dir={warc}"])
        run = ExtractJob().run(["--lake", str(lake)])
        assert run.status == "ok"
        rows = DeltaTable(str(lake / "silver" / "documents")).to_pyarrow_table().to_pylist()
        return {r["url"].split("weblm.test")[1]: r["opt_out"] for r in rows}, run.extra

    flags, _ = crawl("a", "2026-01-01T00:00:00Z", absent, ["/news/old", "/news/own", "/about"])
    assert flags == {"/news/old": None, "/news/own": "noai", "/about": None}
    flags, extra = crawl("b", "2026-02-01T00:00:00Z", (200, "application/json", news), ["/news/new"])
    assert flags == {"/news/old": "tdmrep.json", "/news/own": "noai", "/about": None, "/news/new": "tdmrep.json"}
    assert extra["tdmrep_reflagged"] == 1   # /news/old; /news/new was extracted with the file as it is
    version = DeltaTable(str(lake / "silver" / "documents")).version()
    flags, extra = crawl("c", "2026-03-01T00:00:00Z", absent, [])
    assert flags == {"/news/old": None, "/news/own": "noai", "/about": None, "/news/new": None}
    assert extra["tdmrep_reflagged"] == 2
    assert DeltaTable(str(lake / "silver" / "documents")).version() > version
    version = DeltaTable(str(lake / "silver" / "documents")).version()
    again = ExtractJob().run(["--lake", str(lake)])
    assert again.status == "ok" and again.extra["tdmrep_reflagged"] == 0
    assert DeltaTable(str(lake / "silver" / "documents")).version() == version
