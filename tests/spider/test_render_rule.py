"""The render decision (spider/render/rule.py) and the per-host memory: pure functions, no browser."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from spider.config import load_crawl_config
from spider.render.memory import HostMemory
from spider.render.rule import decide, needs_render, signals

CFG = load_crawl_config(["render.enabled=true"]).render  # the rule exactly as conf/crawl.yaml sets it
ARTICLE = "<p>" + "A server-rendered sentence with enough words to read. " * 40 + "</p>"
REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "extraction"


def page(body: str, head: str = "") -> bytes:
    return f"<!DOCTYPE html><html><head><title>t</title>{head}</head><body>{body}</body></html>".encode()


def test_an_empty_react_mount_point_is_rendered_and_its_signals_recorded():
    decision = needs_render(page('<div id="root"></div><script src="/static/js/main.js"></script>'), CFG)
    assert decision.render and decision.reason == "empty_mount"
    assert decision.signals.empty_mount == "root" and decision.signals.scripts == 1
    assert decision.record()["visible_chars"] == 0


def test_next_data_without_content_is_rendered():
    html = page('<div id="__next"><span> </span></div><script id="__NEXT_DATA__" type="application/json">'
                '{"props": {"pageProps": {"title": "' + "x" * 3000 + '"}}}</script>')
    decision = needs_render(html, CFG)
    assert decision.render and decision.reason == "empty_mount" and decision.signals.bootstrap == "__NEXT_DATA__"
    no_mount = page('<main></main><script id="__NEXT_DATA__" type="application/json">{"a": 1}</script>')
    assert needs_render(no_mount, CFG).reason == "bootstrap"


def test_a_noscript_asking_for_javascript_is_rendered():
    html = page("<noscript>Please enable JavaScript to continue.</noscript><main></main><script>boot()</script>")
    decision = needs_render(html, CFG)
    assert decision.render and decision.reason == "noscript" and decision.signals.noscript_asks_js


def test_thin_text_with_scripts_is_rendered_but_scripts_and_styles_do_not_count_as_text():
    filler = "<script>var data = '" + "z" * 5000 + "';</script><style>body{color:red}</style><!-- long comment -->"
    decision = needs_render(page("<h1>Shop</h1>" + filler), CFG)
    assert decision.render and decision.reason == "thin_text"
    assert decision.signals.visible_chars == len("Shop") and decision.signals.html_bytes > 5000


def test_server_rendered_pages_are_not_rendered_even_with_scripts_or_a_mount_point():
    assert needs_render(page(ARTICLE + "<script>analytics()</script>"), CFG).reason == "enough_text"
    # a widget's empty #app on a page whose text is already there: plenty of text, no render
    assert not needs_render(page('<div id="app"></div>' + ARTICLE * 2 + "<script>w()</script>"), CFG).render
    assert needs_render(page('<div id="root"></div>'), CFG).reason == "no_scripts"  # nothing a browser could add


def test_text_served_in_noscript_for_readers_without_javascript_needs_no_browser():
    forum = page("<noscript><div>" + "A forum post rendered for crawlers and readers without JS. " * 20 +
                 '</div></noscript><section id="main-outlet"></section><script>var preload = "' + "x" * 3000 + '";</script>')
    decision = needs_render(forum, CFG)
    assert not decision.render and decision.signals.noscript_chars > 1000 and decision.signals.visible_chars == 0


def test_bad_html_is_a_reason_not_a_crash():
    assert needs_render(b"", CFG).reason == "unparsable"
    assert signals(b"\x00\xff\xfe garbage <<<").html_bytes == 15  # lxml copes with it; it must not raise
    assert not needs_render(b"\x89PNG\r\n\x1a\n" + bytes(range(256)), CFG).render


def test_host_memory_renders_a_host_first_after_it_needed_it_twice_and_stops_when_renders_add_nothing():
    memory = HostMemory(render_after=2, stop_after=2, max_hosts=2)
    thick = signals(page(ARTICLE + "<script>x()</script>"))
    assert decide(thick, CFG, memory.verdict("spa.example")).render is False
    memory.learn("spa.example", 5000, CFG.min_gain_chars)
    assert memory.verdict("spa.example") == ""
    memory.learn("spa.example", 3000, CFG.min_gain_chars)
    decision = decide(thick, CFG, memory.verdict("spa.example"))
    assert decision.render and decision.reason == "host_needs_render"

    shell = signals(page('<div id="root"></div><script>x()</script>'))
    memory.learn("useless.example", 0, CFG.min_gain_chars)
    memory.learn("useless.example", 10, CFG.min_gain_chars)
    decision = decide(shell, CFG, memory.verdict("useless.example"))
    assert not decision.render and decision.reason == "host_renders_useless"

    memory.learn("third.example", 0, CFG.min_gain_chars)  # bounded: the least recently used host is forgotten
    assert memory.record("spa.example") is None and memory.record("third.example") is not None


@pytest.mark.skipif(not REAL.exists(), reason="../shared/data/extraction is absent")
def test_real_server_rendered_pages_are_almost_never_sent_to_the_browser():
    files = sorted(REAL.glob("trafilatura_eval/eval/*.html.gz"))[:150] + \
        sorted(REAL.glob("readability_testpages/pages/*/source.html.gz"))[:50]
    sent = [f.name for f in files if needs_render(gzip.decompress(f.read_bytes()), CFG).render]
    assert len(files) == 200
    assert len(sent) <= 4, sent   # <= 2 %: every one of these pages has its main text in the plain HTML
