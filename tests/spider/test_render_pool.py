"""The render pool on real Chromium (Debian's /usr/bin/chromium via Playwright) against the local web's JS hosts.

One browser for the whole module (launching one costs ~1 s); each test renders a few pages in it.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import signal
import socket
import time
from contextlib import contextmanager

import lxml.html
import psutil
import pytest

from localweb import LocalWeb, load_config
from localweb.responses import Response
from spider.config import load_crawl_config
from spider.render.gate import SubrequestGate
from spider.render.middleware import rendered_text_chars
from spider.render.pool import RenderPool, _asked_as
from spider.render.rule import needs_render, visible_text

HANG_TIMEOUT = 2.0  # the never-loading page's own render limit (the others get 20 s: CI machines are busy)
DELAY = 0.6  # the sub-request gate's host delay: small, but measurable in the proxy's arrival log
SETTLE = 0.4  # below DELAY, as the crawl's own settle_s (0.5 s) is below its delay (1 s): waits on the gate don't count
# (at 0.3 / 0.2 s, loaded CI runs took DOMs before a worker's next request or a timer's answer: a render's quiet is
# measured in its own events, which reach it late on a busy machine)


@pytest.fixture(scope="module")
def web():
    with LocalWeb(load_config(["js_hosts=true", "pages_per_host=10"])) as running:
        yield running


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def pool(web, loop):
    cfg = load_crawl_config(["render.enabled=true", "render.pages=2", "render.timeout_s=20",
                             "render.max_dom_bytes=1000000", "render.js_heap_mb=64",
                             f"render.settle_s={SETTLE}"]).render
    pool = RenderPool(cfg, SubrequestGate(DELAY, "weblm-test"), proxy=web.proxy_url, user_agent="weblm-test")
    loop.run_until_complete(pool.start())
    yield pool
    loop.run_until_complete(pool.close())


def _is_browser(process) -> bool:
    """Chromium's browser process: started by Playwright's driver, not by another Chromium process."""
    try:
        return process.name() == "chromium" and process.status() != psutil.STATUS_ZOMBIE \
            and "chrom" not in process.parent().name()
    except psutil.Error:
        return False


@contextmanager
def changed(pool, **settings):
    """The pool with some render settings changed, for one test."""
    cfg = pool.cfg
    pool.cfg = dataclasses.replace(cfg, **settings)
    try:
        yield
    finally:
        pool.cfg = cfg


def render(pool, loop, web, url: str):
    host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
    answer = web.respond(host, path)
    return loop.run_until_complete(pool.render(url, answer.body, answer.status, dict(answer.headers)))


def render_html(pool, loop, path: str, page: str, **kw):
    """Render `page` as the trouble host's `path`, served as the crawl fetched it."""
    return loop.run_until_complete(pool.render(f"http://trouble.weblm.test{path}", page.encode(), 200,
                                               {"Content-Type": "text/html"}, **kw))


def text_page(text: str, script: str) -> str:
    """A page showing `text` in <p id='t'>, then running `script`."""
    return f"<html><head><title>t</title></head><body><p id='t'>{text}</p><script>\n{script}</script></body></html>"


def on_first_read(element: str, prop: str, script: str) -> str:
    """Page script that runs `script` once, when the render first reads `element`'s `prop`: the page's height after
    its load settled (`document.body`, scrollHeight), or its DOM's size as a look begins (`document.documentElement`,
    outerHTML).  So what a test's page does lands at that point of the render, however busy the machine."""
    return ("(() => { const real = Object.getOwnPropertyDescriptor(Element.prototype, '%s'); let armed = true;\n"
            "Object.defineProperty(%s, '%s', {configurable: true, get() {\n"
            "  if (armed) { armed = false;\n%s\n}\n"
            "  return real.get.call(this); }}); })();\n" % (prop, element, prop, script))


def json_route(web, path: str, text: str, delay_seconds: float = 0.0) -> None:
    """Serve {"text": text} at the trouble host's `path` (any query string)."""
    web.generated.routes[("trouble.weblm.test", path)] = Response(
        200, (("Content-Type", "application/json"),), json.dumps({"text": text}).encode(), delay_seconds=delay_seconds)


@pytest.mark.parametrize("kind", ["js-csr", "js-spa", "js-scroll"])
def test_a_page_whose_text_needs_javascript_gets_it_from_the_render(pool, loop, web, kind):
    truth = web.truth.by_kind(kind)[0]
    plain = web.respond(truth.host, "/" + truth.url.split("/", 3)[3]).body
    assert needs_render(plain, pool.cfg).render            # the rule sends it to the browser
    paragraphs = truth.text.split("\n\n")
    visible = visible_text(lxml.html.document_fromstring(plain))
    assert not any(p[:60] in visible for p in paragraphs)  # the plain HTML shows none of the text
    result = render(pool, loop, web, truth.url)
    assert result.ok and not result.unsettled, result.detail
    dom = result.html.decode()
    assert all(p[:60] in dom for p in paragraphs)          # the rendered DOM has all of it (scroll: every chunk)
    assert rendered_text_chars(result.html) > len(truth.text) * 0.9
    assert result.subrequests + result.cached >= 1   # a bundle may come from the cache: a render before fetched it
    assert (result.subrequest_bytes > 0) == (result.subrequests > 0)   # bytes from hosts only


def test_sub_requests_obey_robots_txt_and_the_host_delay_and_images_are_never_fetched(pool, loop, web):
    web.hits.clear()
    csr = web.truth.by_kind("js-csr")[1]
    result = render(pool, loop, web, csr.url)
    assert result.ok and result.blocked["robots"] == 1     # /private-api/ is Disallowed for *
    assert web.hits.count("app.weblm.test", "/private-api/") == 0
    assert web.hits.count("app.weblm.test", "/items/") == 0  # the page itself came from the crawl's bytes
    spa = web.truth.by_kind("js-spa")[1]
    result = render(pool, loop, web, spa.url)
    assert result.ok and result.blocked["image"] == 1
    assert web.hits.count("spa.weblm.test", "/_next/static/hero.png") == 0
    feed = web.truth.by_kind("js-scroll")[0]
    render(pool, loop, web, feed.url)
    arrivals = [h.at for h in web.hits.log("feed.weblm.test") if h.target.startswith("/api/feed/")]
    assert len(arrivals) == 3
    assert all(b - a >= DELAY * 0.95 for a, b in zip(arrivals, arrivals[1:]))  # never faster than the delay


def test_a_request_that_starts_after_the_page_went_quiet_still_lands_in_the_dom(pool, loop, web):
    # a loader on a timer (a consent check, an idle callback) asks after the load settled; the answer takes a while.
    # settle_s 1 s for an answer of 0.3 s: at settle_s 0.2 s and 0.15 s, a busy CI machine took the DOM unsettled
    json_route(web, "/api/late.json", "Late arriving paragraph text.", delay_seconds=0.3)
    page = ('<html><head><title>late</title></head><body><div id="root"></div><script>\n'
            "setTimeout(() => fetch('/api/late.json').then(r => r.json()).then(d => {\n"
            "  document.getElementById('root').textContent = d.text; }), 150);\n</script></body></html>")
    with changed(pool, settle_s=1.0):
        result = render_html(pool, loop, "/late", page)
    assert result.ok and result.subrequests == 1 and not result.unsettled
    assert b"Late arriving paragraph text." in result.html


def test_a_request_that_starts_as_the_settled_page_is_measured_is_not_taken_for_a_long_poll(pool, loop, web):
    # a loader asks just after the page settled, before the render's next look began (here: as the render reads the
    # page's height).  Its answer must be waited for: a look that counted only what started or ended within it took
    # the request for one in flight all along, a long poll, and took the DOM without it.  The page spins 200 ms after
    # asking, so that the browser reports the request before the height it was asked for.
    json_route(web, "/api/between.json", "Between looks paragraph text.", delay_seconds=0.2)
    ask = ("fetch('/api/between.json').then(r => r.json()).then(d => {\n"
           "  document.getElementById('root').textContent = d.text; });\n"
           "const end = Date.now() + 200; while (Date.now() < end) {}")
    page = ('<html><head><title>between</title></head><body><div id="root"></div><script>\n'
            + on_first_read("document.body", "scrollHeight", ask) + "</script></body></html>")
    result = render_html(pool, loop, "/between", page)
    assert result.ok and result.subrequests == 1 and not result.unsettled, result
    assert b"Between looks paragraph text." in result.html


@pytest.mark.parametrize("after_ms", [1200, 1800])
def test_a_loader_on_a_timer_is_waited_for_but_not_one_set_far_ahead(pool, loop, web, after_ms):
    # a deferred loader (a consent check, hydration when idle) fires well after the page went quiet; a slide
    # change set 5 s ahead is past render.timer_wait_s and not waited for.  The page sets its timers as the render's
    # first look begins, so that the look ends before the loader fires: set when the page's scripts ran, a loader
    # 1 s on fired before a loaded CI machine's first look had ended, and nothing was left to wait for
    json_route(web, "/api/deferred.json", "Deferred loader paragraph text.")
    timers = ("setTimeout(() => fetch('/api/deferred.json').then(r => r.json()).then(d => {\n"
              "  document.getElementById('root').textContent = d.text; }), %d);\n"
              "setTimeout(() => { document.getElementById('slide').textContent = 'second'; }, 5000);\n"
              "const cancelled = setTimeout(() => null, 2200); clearTimeout(cancelled);" % after_ms)
    page = ('<html><head><title>deferred</title></head><body><div id="root"></div><p id="slide">first</p><script>\n'
            + on_first_read("document.documentElement", "outerHTML", timers) + "</script></body></html>")
    # the loader fires within timer_wait_s of the first look's end, the slide after it; the cancelled timer is
    # within it too, and would show in timer_wait_ms if it were waited for
    assert after_ms / 1000 < 2.2 < SETTLE + pool.cfg.timer_wait_s < 5 - 1.5
    result = render_html(pool, loop, "/deferred", page)
    assert result.ok and result.subrequests == 1 and not result.unsettled, result.detail
    assert b"Deferred loader paragraph text." in result.html
    assert b">first<" in result.html
    assert 0 < result.timer_wait_ms <= after_ms        # counted: the DOM holds what a timer set off


@pytest.mark.parametrize("clock", [False, True])
def test_a_loader_on_an_interval_is_waited_for_run_after_run(pool, loop, web, clock):
    # a loader that checks every 500 ms whether it may load (a consent flag, a script of its own), loads on its
    # third run and clears itself; a clock ticking on an interval beside it holds the render no longer than that
    json_route(web, "/api/checked.json", "Interval loader paragraph text.")
    page = ('<html><head><title>interval</title></head><body><div id="root"></div><p id="clock">0</p><script>\n'
            "let runs = 0;\n"
            "const check = setInterval(() => { if (++runs < 3) return; clearInterval(check);\n"
            "  fetch('/api/checked.json').then(r => r.json()).then(d => {\n"
            "    document.getElementById('root').textContent = d.text; }); }, 500);\n"
            + ("setInterval(() => { document.getElementById('clock').textContent = String(Date.now()); }, 300);\n"
               if clock else "") + "</script></body></html>")
    assert pool.cfg.timer_wait_s > 1.5
    result = render_html(pool, loop, f"/interval-{clock}", page)
    assert result.ok and result.subrequests == 1, result.detail
    assert b"Interval loader paragraph text." in result.html
    assert 0 < result.timer_wait_ms <= 1000 * pool.cfg.timer_wait_s
    if clock:   # waited for the clock until timer_wait_s after the first quiet look, not until the render's limit
        assert result.seconds < pool.cfg.timer_wait_s + 5.0 < pool.cfg.timeout_s


def test_a_timer_that_fills_the_page_once_while_it_is_looked_at_is_no_endless_page(pool, loop, web):
    # a loader that renders inline data on a timer, once, with no request: when that lands while the render watches
    # the DOM for growth, its one insertion (40 KB) must not read as a feed growing without end.  So that it lands
    # there every time, the page sets its timer when the render first measures its DOM (50 ms into a look).
    fill = "setTimeout(() => { document.getElementById('root').innerHTML = block; }, 50);"
    page = ('<html><head><title>once</title></head><body><div id="root"></div><script>\n'
            "const block = ('<p>Inline data ' + 'paragraph text, rendered once. </p>').repeat(800);\n"
            + on_first_read("document.documentElement", "outerHTML", fill) + "</script></body></html>")
    assert SETTLE > 0.1
    result = render_html(pool, loop, "/once", page)
    assert result.ok, (result.failure, result.detail)
    assert result.html.count(b"Inline data paragraph text") == 800


def test_a_page_that_shows_its_text_is_not_held_for_its_timers(pool, loop, web):
    # a chat widget or consent banner on a timer: the page's text is there already, the render does not wait.
    # The timer is 3 s on, inside a timer_wait_s of 6 s, so it would be waited for if the text did not stop that,
    # and a render slowed down by a busy machine still ends before it (at 0.7 s a loaded CI run took the DOM later)
    text = "Server rendered article sentence. " * (pool.cfg.spa_text_chars // 30)
    page = ('<html><head><title>shown</title></head><body><p>%s</p><div id="widget"></div><script>\n'
            "setTimeout(() => { document.getElementById('widget').textContent = 'Chat widget text'; }, 3000);\n"
            "</script></body></html>" % text)
    with changed(pool, timer_wait_s=6.0):
        result = render_html(pool, loop, "/shown", page)
    assert result.ok and b"Server rendered article sentence." in result.html
    assert b'<div id="widget"></div>' in result.html   # still empty: its timer was not waited for
    assert result.timer_wait_ms == 0


def test_a_heartbeat_on_an_interval_is_stopped_as_a_poll_and_the_render_settles(pool, loop, web):
    # an analytics heartbeat: a POST every 50 ms, each refused at once (a render never posts); after 1 + max_repeats
    # asks its interval is not run again, so the page goes quiet (it used to keep asking until the render's last look)
    page = ('<html><head><title>beat</title></head><body><div id="root"></div><script>\n'
            "document.getElementById('root').textContent = 'Heartbeat page text '.repeat(20);\n"
            "setInterval(() => fetch('/api/beat', {method: 'POST', body: 'x'}).catch(() => null), 50);\n"
            "</script></body></html>")
    before = pool.counters["renders_unsettled"]
    result = render_html(pool, loop, "/beat", page)
    assert result.ok and not result.unsettled and b"Heartbeat page text" in result.html
    assert result.blocked["method"] == 1 + pool.cfg.max_repeats and result.subrequests == 0
    assert result.blocked["poll"] == 1
    assert pool.counters["renders_unsettled"] == before


@pytest.mark.parametrize("name, ask", [("same", "'/api/status-same.json'"),
                                       ("buster", "'/api/status-buster.json?_=' + Date.now()"),
                                       ("random", "'/api/status-random.json?t=' + Math.random()")])
def test_a_page_that_polls_its_own_host_is_fetched_a_few_times_then_stopped(pool, loop, web, name, ask):
    # a status poll every 100 ms, as is, or with a cache-buster: each poll would wait on the host delay without end.
    # Its interval asks 1 + max_repeats times, then is stopped (the URL's fourth ask, refused as a repeat, was the
    # page's own first call).  A path per case: a poll the last case's page had sent may still reach the server
    # after its render ended.
    path = f"/api/status-{name}.json"
    json_route(web, path, "Polled status paragraph text.")
    page = ('<html><head><title>poll</title></head><body><div id="root"></div><script>\n'
            "const poll = () => fetch(%s).then(r => r.json()).then(d => {\n"
            "  document.getElementById('root').textContent = d.text; }).catch(() => null);\n"
            "poll(); setInterval(poll, 100);\n</script></body></html>" % ask)
    web.hits.clear()
    result = render_html(pool, loop, f"/poll-{name}", page)
    assert result.ok and not result.unsettled, result.detail
    assert b"Polled status paragraph text." in result.html
    polls = web.hits.count("trouble.weblm.test", path)
    assert polls == result.subrequests == 1 + pool.cfg.max_repeats   # then refused: a poll is not the page's text
    assert result.blocked["repeat"] == 1 and result.blocked["poll"] == 1


SHOW = "document.getElementById('root').textContent = d.text;"
ASK = f"fetch(url).then(r => r.json()).then(d => {{ {SHOW} }});"
POLLS = {   # the poll's body, each run asking for /api/seq.json?seq=N once; what the page runs after it; whether it
    # waits for each answer before it sets its timer again
    "interval": (ASK, "setInterval(poll, 100);", False),
    "timeout set again": (f"{ASK} setTimeout(poll, 100);", "", False),
    "timeout set again after an await": (f"{ASK} await null; setTimeout(poll, 100);", "", False),
    "the same, on a page that sets its global event to null": (f"{ASK} await null; setTimeout(poll, 100);",
                                                              "event = null;", False),
    "timeout set again after the answer": (f"const d = await (await fetch(url)).json(); {SHOW} setTimeout(poll, 100);",
                                           "", True),
    "timeout set again from the answer's handler": (
        f"fetch(url).then(r => r.json()).then(d => {{ {SHOW} setTimeout(poll, 100); }});", "", True),
    "timeout set again from an XHR's load event": (
        "const x = new XMLHttpRequest(); x.open('GET', url);\n"
        f"  x.onload = () => {{ const d = JSON.parse(x.responseText); {SHOW} setTimeout(poll, 100); }}; x.send();", "",
        True),
}


@pytest.mark.parametrize("timer", POLLS)
def test_a_poll_of_a_new_url_each_time_is_stopped_after_its_first_asks(pool, loop, web, timer):
    # each poll asks for a new sequence number, so no URL repeats: the timer that asks is what makes it a poll.  It
    # used to keep the render asking until its budget or half its time was spent (11.3 s at the crawl's 1 s delay)
    # A poll that waits for each answer asks once a host delay: it would still be asking when the render's looks run
    # out (the DOM taken unsettled, as before), so it is allowed one asking run, not 1 + max_repeats.
    json_route(web, "/api/seq.json", "Sequenced paragraph text.")
    body, after, answered = POLLS[timer]
    page = ('<html><head><title>seq</title></head><body><div id="root"></div><script>\n'
            "let n = 0; const poll = async () => { const url = '/api/seq.json?seq=' + (n++);\n  %s };\n"
            "poll(); %s\n</script></body></html>" % (body, after))
    web.hits.clear()
    with changed(pool, max_repeats=0 if answered else pool.cfg.max_repeats):
        result = render_html(pool, loop, f"/seq-{list(POLLS).index(timer)}", page)
        runs = 1 + pool.cfg.max_repeats
    assert result.ok and not result.unsettled, (result.detail, result.blocked)
    assert b"Sequenced paragraph text." in result.html
    # the page's own first call, then 1 + max_repeats from the timer: each a new URL, each sent
    assert web.hits.count("trouble.weblm.test", "/api/seq.json") == result.subrequests == 1 + runs
    assert result.blocked["poll"] == 1 and not result.blocked["repeat"] and not result.blocked["unsent"]


def assert_every_part_loaded(pool, loop, web, name: str, script: str, parts: int) -> None:
    """Render a page whose `script` loads `parts` parts from /api/NAME.json (`?i=N`, the answer's text shown with its
    N after it): every part is asked for once and shown, and no timer is stopped as a poll, though more than a poll
    is let ask."""
    assert parts > 1 + pool.cfg.max_repeats
    json_route(web, f"/api/{name}.json", "Part text.")
    page = (f'<html><head><title>{name}</title></head><body><div id="root"></div><script>\n'
            f"const ask = i => fetch('/api/{name}.json?i=' + i).then(r => r.json());\n"
            f"const show = (d, i) => {{ const div = document.createElement('div'); div.style.height = '3000px';\n"
            "  div.textContent = d.text + i; document.getElementById('root').appendChild(div); };\n"
            f"{script}</script></body></html>")
    web.hits.clear()
    result = render_html(pool, loop, f"/{name}", page)
    assert result.ok and not result.unsettled and not result.blocked["poll"], (result.detail, result.blocked)
    assert all(f"Part text.{i}".encode() in result.html for i in range(parts))
    assert web.hits.count("trouble.weblm.test", f"/api/{name}.json") == result.subrequests == parts


def test_a_scroll_loader_that_loads_each_part_through_one_function_on_a_timer_is_no_poll(pool, loop, web):
    # the first part on a timer as the page loads, the next on each of the render's scrolls: as many asking runs of
    # one function as a poll gets, and one more, each set from a scroll's handler
    assert_every_part_loaded(pool, loop, web, "feed", (
        "let n = 0, loading = false; const more = async () => { if (loading) return; loading = true;\n"
        "  const i = n++; show(await ask(i), i); loading = false; };\n"
        "setTimeout(more, 0); addEventListener('scroll', () => setTimeout(more, 50));\n"), 1 + pool.cfg.scroll_steps)


def test_timeouts_set_for_one_loader_before_it_ran_are_no_poll_however_many_ask(pool, loop, web):
    # a page that loads its five parts with one function, each on a timeout it sets up front: more asking runs than
    # a poll is allowed, but none of those timeouts was set after the loader had asked, so every part is loaded
    assert_every_part_loaded(pool, loop, web, "parts", (
        "const load = i => ask(i).then(d => show(d, i));\n"
        "for (let i = 0; i < 5; i++) setTimeout(load, 20 * i, i);\n"), 5)


def test_a_poll_that_escapes_the_poll_rules_still_ends_as_an_unsettled_render_not_a_timeout(pool, loop, web):
    # each poll asks for a new sequence number (no repeat) and sets its timer again for a new function each time (not
    # stopped as a poll); its waits on the host delay are free only up to half the render's time, then count against
    # settling
    json_route(web, "/api/tick.json", "Ticking page paragraph text.")
    page = ('<html><head><title>tick</title></head><body><div id="root"></div><script>\n'
            "let n = 0; const poll = async () => {\n"
            "  fetch('/api/tick.json?seq=' + (n++)).then(r => r.json()).then(d => {\n"
            "    document.getElementById('root').textContent = d.text; }).catch(() => null);\n"
            "  await null; setTimeout(() => poll(), 100); };\npoll();\n</script></body></html>")
    before = pool.counters["renders_unsettled"]
    result = render_html(pool, loop, "/tick", page, timeout_s=14)
    assert result.ok and result.unsettled, result.detail
    assert pool.counters["renders_unsettled"] == before + 1
    assert b"Ticking page paragraph text." in result.html
    assert result.subrequests >= 3 and not result.blocked["repeat"] and not result.blocked["poll"]
    # the polls still queued on the host's delay when the DOM was taken are dropped with the page (counted), so the
    # next render on this host does not wait behind them (~20 of them: 6 s of delay)
    queued = result.blocked["unsent"]
    assert queued >= 10 and result.subrequests + queued <= pool.cfg.max_subrequests
    json_route(web, "/api/next.json", "Next page paragraph text.")
    page = ('<html><head><title>next</title></head><body><div id="root"></div><script>\n'
            "fetch('/api/next.json').then(r => r.json()).then(d => {\n"
            "  document.getElementById('root').textContent = d.text; });\n</script></body></html>")
    result = render_html(pool, loop, "/next", page)
    assert result.ok and b"Next page paragraph text." in result.html
    assert result.seconds < queued * DELAY / 2


def test_what_a_page_asks_while_its_render_closes_never_reaches_its_host(pool, loop, web):
    # a page's scripts run on while its context closes, after Playwright has stopped routing its requests: a fetch
    # it started then went to the host past the gate (its delay, robots.txt, the budget), 1 render of ~25 polling
    # ones.  This page asks for a new URL every few ms, so that many of its requests start while it closes (the old
    # pool let one through in 3 runs of 3).  It asks by adding script elements, which a spent budget does not stop in
    # the page (its fetch and XHR would fail there) but in the browser; the poll rule counts no script element as an
    # ask, so its timer is never stopped.
    web.generated.routes[("trouble.weblm.test", "/api/hurry.js")] = Response(
        200, (("Content-Type", "text/javascript"),), b"window.hurried = (window.hurried || 0) + 1;")
    page = ('<html><head><title>hurry</title></head><body><div id="root">Hurry</div><script>\n'
            "let n = 0; const hurry = async () => { const s = document.createElement('script');\n"
            "  s.src = '/api/hurry.js?n=' + (n++); s.onload = s.onerror = () => s.remove();\n"
            "  document.head.appendChild(s); await null; setTimeout(hurry, 2); };\nhurry();\n</script></body></html>")
    with changed(pool, max_subrequests=3):   # then refused: the render ends after its looks
        for attempt in range(2):
            web.hits.clear()
            started, routed = time.monotonic(), pool.counters["routed"]
            result = render_html(pool, loop, f"/hurry-{attempt}", page)
            time.sleep(0.5)   # what escaped would arrive meanwhile
            assert result.ok and result.subrequests == 3 and result.blocked["budget"] > 10, result.detail
            hurried = [(round(h.at - started, 3), h.target) for h in web.hits.log("trouble.weblm.test")
                       if h.target.startswith("/api/hurry.js")]
            assert len(hurried) == 3, (attempt, hurried, round(result.seconds, 3))
            # once spent, its asks fail in the browser: 8-15 routed here unloaded and 79 on a loaded CI run, where
            # 1,013-1,131 were (one per refusal)
            assert (pool.counters["routed"] - routed) * 4 < result.blocked["budget"]


@pytest.mark.parametrize("api", ["fetch", "xhr"])
def test_once_the_budget_is_spent_a_pages_fetches_fail_in_the_page_without_a_round_trip(pool, loop, web, api):
    # a page that asks every few ms sent the pool ~250 requests a second to refuse, and a machine four times
    # oversubscribed could not take its DOM in 20 s; once the budget is spent its fetch and XHR fail in the page,
    # as a refused request does (the page sees a network error), and only the few already on their way are routed
    # (it sets its timer again for a new function each time, which the poll rule does not stop)
    json_route(web, "/api/spam.json", "Spam paragraph text.")
    ask = ("fetch(url).catch(() => { failed += 1; })" if api == "fetch" else
           "(() => { const x = new XMLHttpRequest(); x.open('GET', url); x.onerror = () => { failed += 1; };\n"
           " x.send(); })()")
    page = ('<html><head><title>spam</title></head><body><div id="root">Spam</div><p id="failed"></p><script>\n'
            "let n = 0, failed = 0; const spam = async () => { const url = '/api/spam.json?n=' + (n++); %s;\n"
            "  document.getElementById('failed').textContent = 'failed ' + failed;\n"
            "  await null; setTimeout(() => spam(), 2); };\nspam();\n</script></body></html>" % ask)
    routed = pool.counters["routed"]
    web.hits.clear()
    with changed(pool, max_subrequests=3):
        result = render_html(pool, loop, f"/spam-{api}", page)
    assert result.ok and result.subrequests == 3, result.detail
    assert web.hits.count("trouble.weblm.test", "/api/spam.json") == 3
    refused = result.blocked["budget"]
    assert refused > 50
    assert pool.counters["routed"] - routed < 3 + refused / 4   # most were refused in the page, never routed
    failed = int(re.search(rb"failed (\d+)", result.html).group(1))
    assert failed >= refused - 10   # each refusal reached the page as an error (the last few after its DOM was taken)


def test_a_websocket_is_refused_and_counted_never_opened_to_its_host(pool, loop, web):
    # Playwright's route() does not see WebSockets: one the page opens would go to its host past the gate
    page = text_page("Live ticker page text.", "const ws = new WebSocket('ws://trouble.weblm.test/live');\n"
                     "ws.onclose = () => { document.getElementById('t').textContent += ' Closed.'; };\n")
    web.hits.clear()
    result = render_html(pool, loop, "/live", page)
    time.sleep(0.3)
    assert result.ok and result.blocked["websocket"] == 1, result.detail
    assert b"Live ticker page text." in result.html
    assert not [h for h in web.hits.log() if h.host == "trouble.weblm.test" and h.method != "GET"]


def test_a_pages_hints_to_prefetch_other_pages_are_refused_and_counted(pool, loop, web):
    # speculative fetches of pages the page links to: they add nothing to its DOM, and cost the host a request each
    page = ("<html><head><title>hints</title><link rel='prefetch' href='/next-article.html'></head>"
            "<body><p>Hinting page text.</p><a href='/next-article.html'>next</a></body></html>")
    web.hits.clear()
    result = loop.run_until_complete(pool.render(
        "http://trouble.weblm.test/hints", page.encode(), 200,
        {"Content-Type": "text/html", "Link": "</linked-article.html>; rel=prefetch"}))
    assert result.ok and b"Hinting page text." in result.html
    assert result.blocked["prefetch"] == 2 and result.subrequests == 0, result.blocked
    assert web.hits.count("trouble.weblm.test", "/next-article.html") == 0
    assert web.hits.count("trouble.weblm.test", "/linked-article.html") == 0


def test_a_page_gets_neither_webrtc_nor_shared_workers_whose_traffic_would_pass_the_gate(pool, loop, web):
    # Playwright's routing sees neither: WebRTC's UDP goes to any address (the old pool let 2 STUN requests out), and
    # a SharedWorker's fetch reached the host before the page's robots.txt was read
    json_route(web, "/api/shared.json", "Shared worker text.")
    stun = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stun.bind(("127.0.0.1", 0))
    stun.settimeout(0.1)
    page = text_page("Peer page text.", (
        "document.getElementById('t').textContent += ' ' + typeof RTCPeerConnection + ' ' + typeof SharedWorker;\n"
        "try { const pc = new RTCPeerConnection({iceServers: [{urls: 'stun:127.0.0.1:%d'}]});\n"
        "  pc.createDataChannel('x'); pc.createOffer().then(o => pc.setLocalDescription(o)); } catch (e) {}\n"
        "try { new SharedWorker(URL.createObjectURL(new Blob(\n"
        "  [\"fetch('http://trouble.weblm.test/api/shared.json')\"], {type: 'text/javascript'}))); } catch (e) {}\n"
    ) % stun.getsockname()[1])
    web.hits.clear()
    try:
        result = render_html(pool, loop, "/apis", page)
        received, end = [], time.monotonic() + 1.0
        while time.monotonic() < end:
            try:
                received.append(stun.recvfrom(2048))
            except socket.timeout:
                pass
    finally:
        stun.close()
    assert result.ok and b"Peer page text. undefined undefined" in result.html
    assert received == [] and web.hits.count("trouble.weblm.test", "/api/shared.json") == 0


def test_a_page_that_never_finishes_loading_is_a_counted_timeout_and_other_renders_go_on(pool, loop, web):
    about = "http://app.weblm.test/about.html"

    async def both():
        hang_body = web.respond("trouble.weblm.test", "/hang").body
        about_body = web.respond("app.weblm.test", "/about.html").body
        return await asyncio.gather(pool.render("http://trouble.weblm.test/hang", hang_body, timeout_s=HANG_TIMEOUT),
                                    pool.render(about, about_body))

    started = time.monotonic()
    hang, other = loop.run_until_complete(both())
    assert hang.failure == "timeout" and not hang.html
    assert other.ok and b"About" in other.html        # rendered meanwhile in the pool's other page
    assert time.monotonic() - started < pool.cfg.timeout_s   # the hang held one page, not the pool


@pytest.mark.parametrize("path, failure", [("/endless", "endless"), ("/memory", "page_crashed")])
def test_an_endless_scroll_and_a_memory_hog_are_counted_failures(pool, loop, web, path, failure):
    before = pool.counters[f"failed/{failure}"]
    result = render(pool, loop, web, f"http://trouble.weblm.test{path}")
    assert result.failure == failure and not result.html
    assert pool.counters[f"failed/{failure}"] == before + 1


def test_popups_are_closed_and_downloads_refused(pool, loop, web):
    web.hits.clear()
    result = render(pool, loop, web, "http://trouble.weblm.test/popup")
    assert result.ok and b"Popup page text" in result.html
    assert result.downloads == 1 and result.blocked["navigation"] + result.popups >= 2
    assert web.hits.count("trouble.weblm.test", "/about.html") == 0   # no popup ever loaded


def test_a_browser_crash_restarts_the_browser_and_loses_no_render(pool, loop, web):
    render(pool, loop, web, "http://app.weblm.test/about.html")  # make sure a browser is up
    restarts = pool.counters["browser_restarts"]
    browser = [p for p in psutil.Process().children(recursive=True) if _is_browser(p)]
    assert len(browser) == 1   # the browser process (its renderers carry --type=renderer)
    browser[0].send_signal(signal.SIGKILL)
    time.sleep(0.2)
    truth = web.truth.by_kind("js-spa")[-1]
    result = render(pool, loop, web, truth.url)
    assert result.ok and truth.text.split("\n\n")[0][:60] in result.html.decode()
    assert pool.counters["browser_restarts"] == restarts + 1


def test_the_browser_itself_contacts_no_host_but_those_its_pages_ask_for(pool, loop, web):
    # Chromium 156 POSTs to its updater and asks Google sign-in for accounts within a second of each launch, through
    # the proxy (or straight out without one), whatever Playwright's flags say
    own = RenderPool(pool.cfg, SubrequestGate(DELAY, "weblm-test"), proxy=web.proxy_url, user_agent="weblm-test")
    seen = len(web.hits.log())
    loop.run_until_complete(own.start())
    try:
        result = loop.run_until_complete(own.render("http://trouble.weblm.test/quiet", b"<p>A quiet page.</p>", 200,
                                                    {"Content-Type": "text/html"}))
        time.sleep(2.0)   # the sign-in check is retried 1.6 s after launch
    finally:
        loop.run_until_complete(own.close())
    assert result.ok and b"A quiet page." in result.html
    strangers = [(h.method, h.host) for h in web.hits.log()[seen:] if h.host not in web.hosts]
    assert strangers == []


def test_browser_service_hosts_must_be_bare_names_as_chromium_rules_take_them():
    assert load_crawl_config(["render.browser_service_hosts=[]"]).render.browser_service_hosts == []
    for odd in ("b.com:443", "*.google.com", "a.com, b.com"):
        with pytest.raises(ValueError, match="bare host names"):
            load_crawl_config([f"render.browser_service_hosts=[a.com, '{odd}']"])


def test_a_cache_buster_is_not_a_new_url_but_a_page_or_a_cursor_is():
    now = 1_790_000_000.0
    assert _asked_as("http://h.test/api/s.json?_=1&x=1", now) == "http://h.test/api/s.json?x=1"
    assert _asked_as("http://h.test/api/s.json?t=0.8472910385", now) == "http://h.test/api/s.json"
    assert _asked_as(f"http://h.test/api/s.json?ts={int(now * 1000) - 5_000}", now) == "http://h.test/api/s.json"
    assert _asked_as(f"http://h.test/api/s.json?ts={int(now) + 60}", now) == "http://h.test/api/s.json"
    assert _asked_as(f"http://h.test/api/s.json?{int(now)}", now) == "http://h.test/api/s.json"   # a bare query
    assert _asked_as("http://h.test/api/s.json?0.8472910385&page=2", now) == "http://h.test/api/s.json?page=2"
    for kept in ("http://h.test/api/feed.json?page=2", "http://h.test/api/feed.json?cursor=0.5",
                 "http://h.test/item?id=1234567890", "http://h.test/api/s.json",   # an id is no clock of today
                 "http://h.test/item?1234567890", "http://h.test/search?q"):
        assert _asked_as(kept, now) == kept


def test_the_sub_request_budget_counts_requests_let_through_not_only_those_already_sent(pool, loop, web):
    # eight requests at once all queue on the host delay before any is sent: the budget must still hold
    page = ('<html><head><title>many</title></head><body><p>Many requests page text.</p><script>\n'
            "for (let i = 0; i < 8; i++) fetch('/api/many/' + i + '.json').catch(() => null);\n"
            "</script></body></html>")
    with changed(pool, max_subrequests=3):
        result = render_html(pool, loop, "/many", page)
    assert result.ok and result.subrequests == 3 and result.blocked["budget"] == 5


def _script(source: str, *headers: tuple[str, str]) -> Response:
    return Response(200, (("Content-Type", "text/javascript"), *headers), source.encode())


def test_a_script_a_sites_pages_share_is_fetched_once_and_later_renders_take_it_from_the_cache(pool, loop, web):
    host = "trouble.weblm.test"
    web.generated.routes[(host, "/static/shared.js")] = _script(
        "document.getElementById('t').textContent = 'Shared script ran on ' + location.pathname;")
    web.generated.routes[(host, "/static/own.js")] = _script(
        "document.getElementById('o').textContent = 'Own script ran.';", ("Cache-Control", "private, no-store"))
    json_route(web, "/api/shared.json", "Shared data paragraph.")
    page = ("<html><head><title>s</title></head><body><p id='t'></p><p id='o'></p><p id='d'></p>"
            "<script src='/static/shared.js'></script><script src='/static/own.js'></script><script>\n"
            "fetch('/api/shared.json').then(r => r.json())\n"
            "  .then(d => { document.getElementById('d').textContent = d.text; });\n</script></body></html>")
    web.hits.clear()
    first = render_html(pool, loop, "/shared-1", page)
    second = render_html(pool, loop, "/shared-2", page)
    for result, path in ((first, "/shared-1"), (second, "/shared-2")):
        dom = result.html.decode()
        assert result.ok and f"Shared script ran on {path}" in dom, result.detail   # the kept script ran again
        assert "Own script ran." in dom and "Shared data paragraph." in dom
    assert web.hits.count(host, "/static/shared.js") == 1
    assert web.hits.count(host, "/static/own.js") == 2          # the host said no-store
    assert web.hits.count(host, "/api/shared.json") == 2        # a page's data is never kept
    assert (first.cached, second.cached) == (0, 1) and second.subrequests == first.subrequests - 1 == 2
    assert second.subrequest_bytes < first.subrequest_bytes     # its bytes came from no host
    with changed(pool, cache_mb=0):   # off: fetched again
        third = render_html(pool, loop, "/shared-3", page)
    assert third.ok and third.cached == 0 and web.hits.count(host, "/static/shared.js") == 2


def test_two_renders_of_a_site_at_once_fetch_its_script_once(pool, loop, web):
    host = "trouble.weblm.test"
    web.generated.routes[(host, "/static/together.js")] = _script(
        "document.getElementById('t').textContent = 'Together script ran on ' + location.pathname;")
    page = ("<html><head><title>s</title></head><body><p id='t'></p>"
            "<script src='/static/together.js'></script></body></html>")

    async def both():
        return await asyncio.gather(*(pool.render(f"http://{host}/together-{i}", page.encode(), 200,
                                                  {"Content-Type": "text/html"}) for i in (1, 2)))

    web.hits.clear()
    results = loop.run_until_complete(both())
    for i, result in enumerate(results, 1):
        assert result.ok and f"Together script ran on /together-{i}" in result.html.decode(), result.detail
    # the second waited for the host's turn behind the first, then found the script kept
    assert web.hits.count(host, "/static/together.js") == 1
    assert sorted(r.cached for r in results) == [0, 1] and sum(r.subrequests for r in results) == 1


def test_the_cache_keeps_only_scripts_and_stylesheets():
    assert load_crawl_config(["render.cache_types=[script]"]).render.cache_types == ["script"]
    for odd in ("fetch", "xhr", "document"):
        with pytest.raises(ValueError, match="cache_types a subset"):
            load_crawl_config([f"render.cache_types=[script, {odd}]"])
