"""Selective rendering in a real crawl (python -m spider.crawl) of the local web's JS hosts and one plain host."""
from __future__ import annotations

import lxml.html
import pytest

from crawl_helpers import read_warc, run_crawl
from localweb import LocalWeb, load_config
from localweb.js_sites import NEEDS_RENDER_KINDS
from spider.render.rule import visible_text


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("render-crawl")
    with LocalWeb(load_config(["js_hosts=true", "pages_per_host=10", "index_page_size=5"])) as web:
        seeds = [f"http://{role}.weblm.test/" for role in ("app", "spa", "feed", "trouble", "news")]
        run = run_crawl(seeds, tmp, ["proxy=" + web.proxy_url, "render.enabled=true", "render.timeout_s=8",
                                     "render.max_dom_bytes=1000000", "max_pages_per_host=12"], timeout=240)
        records = [r for f in run.warc_files for r in read_warc(f)]
        yield web, run, records


def test_the_crawl_renders_only_the_pages_that_need_it_and_keeps_going_past_bad_ones(crawled):
    web, run, _ = crawled
    assert run.returncode == 0, run.log[-3000:]
    render = run.stats["render"]
    positives = sum(len(web.truth.by_kind(k)) for k in NEEDS_RENDER_KINDS)
    hostile = len(web.truth.by_kind("js-hostile"))
    assert render["renders"] == positives + hostile            # nothing else went to the browser
    assert render["ok"] >= positives + 1                       # the popup page renders; the JS pages all do
    failed = {k: v for k, v in render.items() if k.startswith("failed/")}
    assert failed.get("failed/timeout", 0) >= 1 and failed.get("failed/endless", 0) == 1   # /hang, /endless
    assert sum(failed.values()) == 3                            # /hang, /endless, /memory (crash or timeout)
    assert render["decided/no_scripts"] > 0 and render["decided/enough_text"] >= 3   # plain pages, /about.html
    assert render["blocked/robots"] >= 1 and render["text_chars_gained"] > 5000
    # the SPA's pages share one bundle: fetched for the first render, taken from the render cache by the others
    assert web.hits.count("spa.weblm.test", "/_next/static/app.js") == 1
    assert render["cached"] == len(web.truth.by_kind("js-spa")) - 1 > 0


def test_each_rendered_dom_is_a_conversion_record_that_refers_to_the_untouched_response(crawled):
    web, run, records = crawled
    responses = {r["headers"].get_header("WARC-Record-ID"): r for r in records if r["type"] == "response"}
    conversions = [r for r in records if r["type"] == "conversion"]
    assert len(conversions) == run.stats["render"]["recorded"] == run.stats["render"]["ok"]
    for conv in conversions:
        h = conv["headers"]
        original = responses[h.get_header("WARC-Refers-To")]
        url = h.get_header("WARC-Target-URI")
        assert original["headers"].get_header("WARC-Target-URI") == url
        assert conv["digest_ok"] and h.get_header("Content-Type") == "text/html; charset=utf-8"
        assert int(h.get_header("WARC-X-Render-Ms")) > 0 and h.get_header("WARC-X-Render-Reason")
        truth = web.truth[url]
        if truth.kind in NEEDS_RENDER_KINDS:
            first = truth.text.split("\n\n")[0][:60]
            assert first in conv["raw"].decode()
            assert first not in visible_text(lxml.html.document_fromstring(original["raw"]))   # stored as fetched
            # its data, or its bundle: fetched once per crawl process, later pages take it from the render cache
            assert int(h.get_header("WARC-X-Render-Subrequests") or 0) + int(h.get_header("WARC-X-Render-Cached") or 0)
            assert h.get_header("WARC-X-Render-Unsettled") is None   # every request the page made had landed
            deferred = "after load" in truth.note                   # its loader runs on a timer (localweb)
            assert bool(h.get_header("WARC-X-Render-Timer-Wait-Ms")) == deferred, (url, truth.note)
    cached = [int(c["headers"].get_header("WARC-X-Render-Cached") or 0) for c in conversions]
    assert sum(cached) == run.stats["render"]["cached"]   # counted as written
    unsettled = [c for c in conversions if c["headers"].get_header("WARC-X-Render-Unsettled") == "true"]
    assert len(unsettled) == run.stats["render"].get("unsettled", 0)   # counted as written
    waited = [int(c["headers"].get_header("WARC-X-Render-Timer-Wait-Ms") or 0) for c in conversions]
    assert sum(w > 0 for w in waited) == run.stats["render"].get("timer_waits", 0) >= 1
    assert sum(waited) == run.stats["render"].get("timer_wait_ms", 0)
    hostile = {u for u in web.truth if web.truth[u].kind == "js-hostile"}
    kept = {r["headers"].get_header("WARC-Target-URI") for r in responses.values()}
    assert hostile <= kept   # failed renders: the plain HTML is archived all the same
