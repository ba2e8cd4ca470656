"""Recrawls: a page comes back with the last 200's validators (If-None-Match, If-Modified-Since), an unchanged page's
304 is archived as it came (a server-not-modified revisit naming that 200), and each page's interval adapts (Nutch's
AdaptiveFetchSchedule): longer when it came back unchanged, shorter when it changed.  The pure rules first, then two
crawls over one frontier, embedded and Redis."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from dataclasses import dataclass

import pytest

from crawl_helpers import ROOT, crawl_command, env, finished, read_warc
from spider.frontier import recrawl


@dataclass
class Settings:
    adaptive_recrawl: bool = True
    recrawl_min_s: float = 3600.0
    recrawl_max_s: float = 86400.0 * 365
    recrawl_inc_rate: float = 0.4
    recrawl_dec_rate: float = 0.2


DAY = 86400.0


def test_the_capture_a_304_refers_to_is_kept_compact():
    record_id = "<urn:uuid:c805281a-cad8-4e5f-a8dd-7b9b1e6c280e>"
    kept = recrawl.capture("2026-12-04T19:16:08Z", record_id, "http://a.test/p", "http://a.test/p")
    assert kept == ["2026-12-04T19:16:08Z", "c805281a-cad8-4e5f-a8dd-7b9b1e6c280e"]
    assert recrawl.captured({recrawl.CAPTURE: kept}, "http://a.test/p") == ("http://a.test/p", kept[0], record_id)
    moved = recrawl.capture("d", "<other-id>", "http://a.test/new", "http://a.test/p")   # the 200 came via a redirect
    assert recrawl.captured({recrawl.CAPTURE: moved}, "http://a.test/p") == ("http://a.test/new", "d", "<other-id>")
    assert recrawl.captured({}, "http://a.test/p") is None and recrawl.captured(None, "u") is None


def test_the_first_answer_keeps_validators_and_the_first_interval():
    state = recrawl.observe(None, 200, {"etag": '"v1"', "last-modified": "Tue, 01 Dec 2026 10:00:00 GMT"}, b"page",
                            DAY, Settings())
    assert state[recrawl.ETAG] == '"v1"' and state[recrawl.LAST_MODIFIED] == "Tue, 01 Dec 2026 10:00:00 GMT"
    assert state[recrawl.INTERVAL] == DAY and state["changed"] is False
    assert recrawl.conditional_headers(state) == {"If-None-Match": '"v1"',
                                                  "If-Modified-Since": "Tue, 01 Dec 2026 10:00:00 GMT"}
    assert recrawl.conditional_headers(None) == {}


def test_unchanged_pages_come_back_less_often_and_changed_ones_more_often_within_bounds():
    first = recrawl.observe(None, 200, {"etag": '"v1"'}, b"page", DAY, Settings())
    not_modified = recrawl.observe(first, 304, {}, b"", DAY, Settings())
    assert not_modified[recrawl.INTERVAL] == pytest.approx(1.4 * DAY) and not_modified[recrawl.ETAG] == '"v1"'
    assert not_modified["changed"] is False
    same_body = recrawl.observe(first, 200, {}, b"page", DAY, Settings())   # no validators: the body tells
    assert same_body[recrawl.INTERVAL] == pytest.approx(1.4 * DAY) and recrawl.ETAG not in same_body
    changed = recrawl.observe(first, 200, {"etag": '"v2"'}, b"new page", DAY, Settings())
    assert changed[recrawl.INTERVAL] == pytest.approx(0.8 * DAY) and changed["changed"] is True
    state = first
    for _ in range(40):
        state = recrawl.observe(state, 200, {}, str(state[recrawl.INTERVAL]).encode(), DAY, Settings())
    assert state[recrawl.INTERVAL] == 3600.0   # recrawl_min_s
    for _ in range(40):
        state = recrawl.observe(state, 304, {}, b"", DAY, Settings())
    assert state[recrawl.INTERVAL] == 86400.0 * 365   # recrawl_max_s
    fixed = recrawl.observe(first, 304, {}, b"", DAY, Settings(adaptive_recrawl=False))
    assert fixed[recrawl.INTERVAL] == DAY


def test_the_state_is_kept_small_and_a_state_written_before_is_still_read():
    state = recrawl.observe(None, 200, {"etag": '"v1"'}, b"page", DAY, Settings())
    state.pop("changed")
    assert json.dumps(state, separators=(",", ":")) == (
        '{"t":"\\"v1\\"","d":"%s","i":86400}' % recrawl.body_digest(b"page"))   # no empty Last-Modified, no ".0"
    before = {"etag": '"v1"', "last_modified": "Tue, 01 Dec 2026 10:00:00 GMT", "digest": recrawl.body_digest(b"page"),
              "interval": DAY, "capture": ["2026-12-04T19:16:08Z", "c805281a-cad8-4e5f-a8dd-7b9b1e6c280e"]}
    assert recrawl.conditional_headers(before) == {"If-None-Match": '"v1"',
                                                   "If-Modified-Since": "Tue, 01 Dec 2026 10:00:00 GMT"}
    assert recrawl.interval_of(before, 1.0) == DAY
    assert recrawl.captured(before, "http://a.test/p")[1] == "2026-12-04T19:16:08Z"
    same = recrawl.observe(before, 200, {"etag": '"v1"'}, b"page", DAY, Settings())   # the digest still compares
    assert same["changed"] is False and same[recrawl.INTERVAL] == pytest.approx(1.4 * DAY)
    not_modified = recrawl.observe(before, 304, {}, b"", DAY, Settings())   # rewritten in the short form, all of it
    assert not_modified[recrawl.CAPTURE] == before["capture"] and not_modified[recrawl.ETAG] == '"v1"'
    assert not [key for key in not_modified if key in before]


@pytest.mark.parametrize("status", [301, 404, 503])
def test_answers_that_say_nothing_of_the_content_leave_the_state(status):
    first = recrawl.observe(None, 200, {"etag": '"v1"'}, b"page", DAY, Settings())
    assert recrawl.observe(first, status, {}, b"", DAY, Settings()) is None
    assert recrawl.observe(None, 304, {}, b"", DAY, Settings()) is None   # a 304 nobody asked for


SITE = "http://re.weblm.test"
HOME = b"<html><body><a href='/same'>same</a> <a href='/changing'>changing</a> <a href='/plain'>plain</a></body></html>"
SAME = b"<html><body><p>This page never changes.</p></body></html>"
PLAIN = b"<html><body><p>Nor does this one, but its server sends no validators.</p></body></html>"


def _site(server, fetches):
    def answer(path: str):
        if path == "/robots.txt":
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
        fetches[path] = fetches.get(path, 0) + 1
        if path == "/same":
            if b'if-none-match: "same-1"' in server.received[path].lower():
                return b'HTTP/1.1 304 Not Modified\r\nETag: "same-1"\r\n\r\n', b""
            head = (b'HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: "same-1"\r\n'
                    b"Last-Modified: Tue, 01 Dec 2026 10:00:00 GMT\r\nContent-Length: %d\r\n\r\n")
            return head % len(SAME), SAME
        body = {"/": HOME, "/plain": PLAIN}.get(path, b"<html><body><p>Edition %d</p></body></html>" % fetches[path])
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body), body
    return answer


def test_a_recrawl_asks_conditionally_archives_the_304_and_adapts_each_pages_interval(tmp_path, raw_server, frontier):
    from rawhttp import RawHttpServer

    fetches: dict[str, int] = {}
    server: RawHttpServer = raw_server(lambda path: answer(path))
    answer = _site(server, fetches)
    first_s = 8.0   # every page comes back after 8 s, seeds too; an adaptive interval may go down to 1 s
    overrides = ["proxy=" + server.proxy_url(), f"frontier.recrawl_after_s={first_s}",
                 f"frontier.hot_recrawl_after_s={first_s}", "frontier.recrawl_min_s=1", *frontier]

    def crawl():
        cmd = crawl_command([f"{SITE}/"], tmp_path, overrides)
        proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90)
        return finished(proc.returncode, tmp_path, proc.stdout + proc.stderr)

    first = crawl()
    assert first.returncode == 0, first.log[-3000:]
    assert fetches == {"/": 1, "/same": 1, "/changing": 1, "/plain": 1}
    assert b"if-none-match" not in server.received["/same"].lower()
    time.sleep(first_s + 0.5)
    again = crawl()
    assert again.returncode == 0, again.log[-3000:]
    assert fetches == {"/": 2, "/same": 2, "/changing": 2, "/plain": 2}
    asked = server.received["/same"].lower()
    assert b'if-none-match: "same-1"' in asked and b"if-modified-since: tue, 01 dec 2026 10:00:00 gmt" in asked
    assert b"if-none-match" not in server.received["/plain"].lower()   # nothing to ask with
    recrawl_stats = {k: v for k, v in again.stats["scrapy"].items() if k.startswith("weblm/recrawl/")}
    assert recrawl_stats == {"weblm/recrawl/conditional": 1, "weblm/recrawl/not_modified": 1,
                             "weblm/recrawl/unchanged": 2, "weblm/recrawl/changed": 1}
    assert not any(k.startswith("weblm/errors/") for k in again.stats["scrapy"]), again.stats["scrapy"]
    # the 304 is archived as it came, as a revisit of the server-not-modified profile that names the first 200
    records = [r for path in again.warc_files for r in read_warc(path)
               if r["headers"].get_header("WARC-Target-URI") == f"{SITE}/same"]
    (original,) = [r for r in records if r["type"] == "response"]
    (revisit,) = [r for r in records if r["type"] == "revisit"]
    assert original["http"].get_statuscode() == "200" and revisit["http"].get_statuscode() == "304"
    assert revisit["headers"].get_header("WARC-Profile") == (
        "http://netpreserve.org/warc/1.1/revisit/server-not-modified")
    for field, of in (("WARC-Refers-To", "WARC-Record-ID"), ("WARC-Refers-To-Date", "WARC-Date"),
                      ("WARC-Refers-To-Target-URI", "WARC-Target-URI")):
        assert revisit["headers"].get_header(field) == original["headers"].get_header(of), field
    assert revisit["headers"].get_header("WARC-Payload-Digest") is None and revisit["digest_ok"] is not False
    # / and /plain came back with the same bodies: identical-payload revisits; /same as the 304's revisit
    assert again.stats["scrapy"]["weblm/warc/revisits"] == 3
    if frontier:   # Redis: the validators could only have come back through the payloads it kept (above)
        return
    with sqlite3.connect(tmp_path / "frontier.db") as db:
        rows = {json.loads(payload)["url"]: (json.loads(payload)["meta"][recrawl.META_KEY], until)
                for payload, until in db.execute("SELECT payload, until FROM urls WHERE state = 'due'")}
    now = time.time()
    for page, factor in ((f"{SITE}/same", 1.4), (f"{SITE}/plain", 1.4), (f"{SITE}/", 1.4), (f"{SITE}/changing", 0.8)):
        state, due = rows[page]
        assert state[recrawl.INTERVAL] == pytest.approx(first_s * factor), page
        assert now < due <= now + first_s * factor, page
    assert rows[f"{SITE}/same"][0][recrawl.ETAG] == '"same-1"'
    assert recrawl.captured(rows[f"{SITE}/same"][0], f"{SITE}/same") == tuple(
        original["headers"].get_header(f) for f in ("WARC-Target-URI", "WARC-Date", "WARC-Record-ID"))
    assert len(rows[f"{SITE}/same"][0][recrawl.CAPTURE]) == 2   # [date, uuid]: the URL is the frontier's own
