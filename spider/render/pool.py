"""A bounded pool of headless Chromium pages (Playwright, Debian's /usr/bin/chromium) that renders fetched pages.

The page's own HTML is served to the browser from the bytes the crawl already fetched (no second fetch of the
page); its sub-requests go through `SubrequestGate` (robots.txt, host delay), are counted, and images, fonts
and media are never requested.  Limits: `pages` renders at once, `timeout_s` per render, a V8 heap of
`js_heap_mb` per renderer (a script that allocates without end crashes its own renderer, not the crawl),
`max_dom_bytes` of DOM, `max_subrequests` per page (then its fetch and XHR fail in the page, with no round trip
through the pool); popups are closed and downloads refused.  Every failure is
a `RenderResult` with `failure` set, never an exception: the caller keeps the plain HTML.  A browser that dies
is started again and the render tried once more on it, so no request is lost to a crash.
The DOM is taken once the page is quiet: its sub-requests answered (their waits on the crawl's politeness free, up
to half the timeout), the scrolls' lazy content loaded, and, on a page still short of text, the timers that fire
within timer_wait_s run (a deferred loader).  A URL asked again and again (a poll) is refused after max_repeats,
and a timer that keeps asking (a poll of a new URL each time) is stopped after max_repeats + 1 asks;
a DOM taken with requests in flight or still starting is marked `unsettled`.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright

from spider.render.cache import SubresourceCache
from spider.render.config import RenderConfig
from spider.render.gate import SubrequestGate

logger = logging.getLogger(__name__)

_RANDOM = re.compile(r"0\.\d{6,}")  # Math.random() as a query value
_HOP_HEADERS = {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
# how far the page reaches below the viewport (0: it fits, nothing to scroll for)
_HEIGHT_JS = "() => document.body ? Math.max(0, document.body.scrollHeight - window.innerHeight) : 0"
_DOM_BYTES_JS = "() => document.documentElement ? document.documentElement.outerHTML.length : 0"
_BLANK_S = 1.0  # at most this for the page to leave for about:blank before its context closes
# resolves once the page has drawn two frames and run a task after them: the intersection observers, scroll
# handlers and rAF callbacks that a scroll or a response set off have run and sent their requests (250 ms at most,
# for a page that draws no frames)
_FRAMES_JS = ("() => new Promise(done => { const late = setTimeout(done, 250);"
              " requestAnimationFrame(() => requestAnimationFrame(() => { clearTimeout(late); setTimeout(done, 0); }));"
              " })")
# Installed before the page's own scripts: remembers when each pending setTimeout and the next run of each
# setInterval will fire (cleared and fired timeouts forgotten), so that the render can wait for a loader on a timer,
# or on an interval that checks until it can load.  `__weblmTimersDue(ms)`: how long until the last of those that
# fire within `ms` has fired (0: none).  So a clock on an interval holds a page that does not show its text yet for
# render.timer_wait_s at most, run after run.
# It also stops polls: a timer callback (the function itself: zone.js hands every timer a closure of one source, so
# the source would join them all) whose runs have asked for ASK_LIMIT requests (render.max_repeats + 1: fetch or XHR,
# called while it runs) is not run again when it repeats: as an interval, as a timeout it set again while running
# (`setTimeout(poll, ms)` in poll), or as a timeout set for it by anyone once it has asked that often (`await
# fetch(...); setTimeout(poll, ms)`, or from the answer's handler), unless that is set from an event's handler other
# than an XHR's (a scroll's: the render scrolls for lazy content, and a page may load each part through one function
# on a timer).  Timeouts set for one function before it ran (a loader of several parts) are no poll either.  The
# repeat rule below catches a poll of one URL; this one also a poll of a new URL each time (`?seq=N`), which would
# otherwise keep the render asking until its budget or half its time is spent.  A poll that sets a new function each
# time (`setTimeout(() => poll(), ms)`) is not caught here (the render's bounds still end it).
# And once the render's sub-request budget is spent (the pool calls `__weblmSpent()` at its first "budget" refusal),
# the page's fetch and XHR fail at once in the page, as a refused request does, without a round trip through the pool
# each: a page that asked every few ms sent ~250 a second, and a busy machine could not take its DOM in time.
# `__weblmCounts()`: [timers stopped as polls, requests refused in the page for the budget].
_TIMERS_JS = """(() => {
  const due = new Map(), period = new Map(), setT = window.setTimeout, setI = window.setInterval;
  const clearT = window.clearTimeout, clearI = window.clearInterval;
  const asks = new WeakMap(), fetch0 = window.fetch, send0 = XMLHttpRequest.prototype.send;
  let running = null, stopped = 0, spent = false, refused = 0;   // running: the timer callback running now
  const own = (name, value) => Object.defineProperty(window, name, {value, configurable: true, writable: true});
  const ask = () => { if (running !== null) asks.set(running, (asks.get(running) || 0) + 1); };
  const XHR = XMLHttpRequest;   // the page's own names may be replaced or gone: `event` may even be null
  const onEvent = () => { const e = window.event; return e != null && !(e.target instanceof XHR); };
  const track = (set, repeat) => function (callback, ms, ...args) {
    let id;
    const every = Math.max(Number(ms) || 0, 4);  // a browser runs an interval no faster than every 4 ms
    const key = typeof callback === 'function' ? callback : null;
    // an interval, a timeout set again by itself, or one set for a callback that already asked ASK_LIMIT times
    // (not from an event's handler, a scroll's or the page's load: those are the page's loaders; an XHR's is a poll's)
    const polls = key !== null && (repeat || running === key || ((asks.get(key) || 0) >= ASK_LIMIT && !onEvent()));
    const run = key === null ? callback : function () {
      if (polls && (asks.get(key) || 0) >= ASK_LIMIT) {
        stopped += 1;
        due.delete(id); period.delete(id);
        if (repeat) clearI.call(window, id);
        return undefined;
      }
      if (repeat && period.has(id)) due.set(id, performance.now() + every); else due.delete(id);
      const outer = running;
      running = key;
      try { return callback.apply(this, arguments); } finally { running = outer; }
    };
    id = set.call(window, run, ms, ...args);
    due.set(id, performance.now() + (Number(ms) || 0));
    if (repeat) period.set(id, every);
    return id;
  };
  // setTimeout and setInterval share one id space: either clear ends either, as in a browser
  const forget = clear => function (id) { due.delete(id); period.delete(id); return clear.call(window, id); };
  own('setTimeout', track(setT, false));
  own('setInterval', track(setI, true));
  own('clearTimeout', forget(clearT));
  own('clearInterval', forget(clearI));
  if (fetch0) own('fetch', function () {
    ask();
    if (!spent) return fetch0.apply(this, arguments);
    refused += 1;
    return Promise.reject(new TypeError('Failed to fetch'));
  });
  XMLHttpRequest.prototype.send = function () {
    ask();
    if (!spent) return send0.apply(this, arguments);
    refused += 1;
    const xhr = this;   // a network error, as the browser reports one: asynchronously, error then loadend
    setT.call(window, () => { xhr.dispatchEvent(new ProgressEvent('error'));
                              xhr.dispatchEvent(new ProgressEvent('loadend')); }, 0);
    return undefined;
  };
  own('__weblmSpent', () => { spent = true; });
  own('__weblmCounts', () => [stopped, refused]);
  own('__weblmTimersDue', within => {
    const now = performance.now();
    let last = 0;
    for (const [id, at] of due) {
      if (at < now - 1000 && !period.has(id)) due.delete(id);  // a string callback that ran
      else if (at - now <= within) last = Math.max(last, at - now);
    }
    return last;
  });
})();"""
# Installed before the page's own scripts: the APIs whose traffic Playwright's routing never sees, so that it would go
# past the gate, are not there.  WebRTC: its UDP (STUN, peers) goes to any address, past the proxy too, and Chromium 156
# ignored --force-webrtc-ip-handling-policy=disable_non_proxied_udp.  SharedWorker: its fetches reached the host before
# the page's robots.txt was read (a dedicated Worker's are routed).  A render reads a page's text, which needs neither.
_UNROUTED_APIS_JS = """(() => {
  for (const name of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel', 'RTCIceCandidate',
                      'RTCSessionDescription', 'SharedWorker']) {
    try { delete window[name]; } catch (e) { /* not configurable here: left as it is */ }
  }
})();"""
_COUNTS_JS = "() => window.__weblmCounts ? window.__weblmCounts() : [0, 0]"
_SPENT_JS = "() => window.__weblmSpent && window.__weblmSpent()"
_TIMERS_DUE_JS = ("([text_chars, within]) => !window.__weblmTimersDue || !document.body"
                  " || document.body.innerText.length >= text_chars ? 0 : window.__weblmTimersDue(within)")


@dataclass
class RenderResult:
    url: str
    html: bytes = b""                 # the rendered DOM (UTF-8); empty when the render failed
    failure: str = ""                 # "" | timeout | page_crashed | browser_crashed | dom_too_large | endless | error
    detail: str = ""
    seconds: float = 0.0
    subrequests: int = 0              # sub-requests fetched for the page (through the gate)
    cached: int = 0                   # scripts and stylesheets answered from the pool's cache: not fetched
    subrequest_bytes: int = 0         # their body bytes
    blocked: Counter = field(default_factory=Counter)   # sub-requests not made, by reason
    popups: int = 0
    downloads: int = 0
    attempts: int = 1
    unsettled: bool = False           # the DOM was taken with requests in flight or starting: answers may be missing
    timer_wait_ms: int = 0            # waited for the page's timers (a deferred loader) before the DOM was taken

    @property
    def ok(self) -> bool:
        return not self.failure


class _PageCrashed(Exception):
    pass


class _Traffic:
    """The page's requests: how many are in flight, how many have started or ended so far, how many of those in
    flight wait on the crawl itself (robots.txt, their host's delay) rather than on a server, and how much of that
    waiting settling may still leave uncounted (`free_hold_s`: a page that polls would otherwise never settle)."""

    def __init__(self, free_hold_s: float = 0.0) -> None:
        self.in_flight = 0
        self.count = 0
        self.held = 0
        self.free_hold_s = free_hold_s
        self.admitted = 0                 # sub-requests let through to the gate (the budget counts them, not sends)
        self.asked: Counter = Counter()   # GETs by URL, cache-busters removed: a poll asks the same again and again
        self.closing = False              # the render has ended: what the page asks now is aborted
        self.settled = 0                  # `count` when the page last settled: what started since is news to a look
        self.spent = False                # the page was told its budget is spent
        self.routed: set = set()          # the requests the route saw: the others that fail were refused in the browser
        self.refusing: asyncio.Future | None = None   # every request failing in the browser (`_refuse_all`), once
        self.from_cache: set = set()      # the requests answered from the pool's cache: no bytes from a host

    def started(self) -> None:
        self.in_flight += 1
        self.count += 1

    def ended(self) -> None:
        self.in_flight -= 1
        self.count += 1


class _Hold:
    """One sub-request waiting on the crawl (robots.txt, its host's delay), from its routing until it is sent or
    refused; released once."""

    def __init__(self, traffic: _Traffic) -> None:
        self.traffic = traffic
        self.on = True
        self.admitted = False   # let through by the render's own rules: the budget counts it
        traffic.held += 1

    def release(self) -> None:
        if self.on:
            self.on = False
            self.traffic.held -= 1


class RenderPool:
    def __init__(self, cfg: RenderConfig, gate: SubrequestGate, proxy: str = "", user_agent: str = ""):
        self.cfg = cfg
        self.gate = gate
        self.proxy = proxy
        self.user_agent = user_agent
        self.counters: Counter[str] = Counter()
        self.cache = SubresourceCache(cfg.cache_mb << 20, cfg.cache_max_age_s)
        self._slots = asyncio.Semaphore(cfg.pages)
        self._playwright = None
        self._browser = None
        self._starting: asyncio.Lock | None = None
        self._renders_on_browser = 0

    # --- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._ensure_browser()

    async def close(self) -> None:
        browser, self._browser = self._browser, None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), 10)
            except Exception as exc:  # noqa: BLE001  (a dead browser has nothing left to close)
                logger.debug("closing Chromium: %s", exc)
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None

    async def _ensure_browser(self):
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._browser is not None and self._browser.is_connected() \
                    and self._renders_on_browser < self.cfg.restart_after_renders:
                return self._browser
            if self._browser is not None:
                old, self._browser = self._browser, None
                self.counters["browser_restarts"] += 1
                try:
                    await asyncio.wait_for(old.close(), 5)
                except Exception:  # noqa: BLE001  (it is gone already)
                    pass
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.cfg.executable, headless=True,
                args=["--no-sandbox",  # root in containers; the browser only sees pages we already fetched
                      f"--js-flags=--max-old-space-size={self.cfg.js_heap_mb}",
                      "--disable-dev-shm-usage", "--disable-gpu", "--mute-audio",
                      "--disable-background-networking", "--no-first-run", *self._service_hosts_flag()],
                proxy=self._proxy_settings())
            self._renders_on_browser = 0
            self.counters["browser_launches"] += 1
            return self._browser

    def _service_hosts_flag(self) -> list[str]:
        # Chromium's updater and sign-in call Google from launch on, whatever the flags say (--disable-component-update,
        # --disable-sync did not stop them): their names resolve to nothing, and _proxy_settings keeps them off the
        # proxy, which would otherwise resolve them itself
        hosts = self.cfg.browser_service_hosts
        return [f"--host-resolver-rules={', '.join(f'MAP {host} ~NOTFOUND' for host in hosts)}"] if hosts else []

    def _proxy_settings(self) -> dict | None:
        if not self.proxy:
            return None
        settings = {"server": self.proxy}
        if self.cfg.browser_service_hosts:
            settings["bypass"] = ",".join(self.cfg.browser_service_hosts)
        return settings

    # --- rendering ---------------------------------------------------------------------------------------
    async def render(self, url: str, body: bytes, status: int = 200, headers: dict[str, str] | None = None,
                     timeout_s: float | None = None) -> RenderResult:
        """Render `url` from its already-fetched `body` within `timeout_s` (default render.timeout_s); never raises."""
        timeout_s = timeout_s or self.cfg.timeout_s
        async with self._slots:
            started = time.monotonic()
            result = RenderResult(url)
            for attempt in (1, 2):
                result = RenderResult(url, attempts=attempt)
                try:
                    browser = await self._ensure_browser()
                    self._renders_on_browser += 1
                    await asyncio.wait_for(self._render_once(browser, url, body, status, headers or {}, result,
                                                             timeout_s), timeout_s)
                except asyncio.TimeoutError:
                    result.failure, result.detail = "timeout", f"no rendered DOM within {timeout_s} s"
                except _PageCrashed as exc:
                    result.failure, result.detail = "page_crashed", str(exc)
                except PlaywrightError as exc:
                    if self._browser is None or not self._browser.is_connected():
                        result.failure, result.detail = "browser_crashed", _first_line(exc)
                        self.counters["browser_crashes"] += 1
                        if attempt == 1:
                            continue  # restart the browser and render again: a crash never loses the request
                    else:
                        result.failure, result.detail = "error", _first_line(exc)
                except Exception as exc:  # noqa: BLE001  (one bad page must not stop the crawl's renders)
                    result.failure, result.detail = "error", f"{type(exc).__name__}: {exc}"
                break
            result.seconds = round(time.monotonic() - started, 3)
            self.counters["renders"] += 1
            self.counters["renders_ok" if result.ok else f"failed/{result.failure}"] += 1
            self.counters["renders_unsettled"] += result.ok and result.unsettled
            self.counters["timer_waits"] += result.ok and result.timer_wait_ms > 0
            self.counters["subrequests"] += result.subrequests
            self.counters["subrequest_bytes"] += result.subrequest_bytes
            for reason, n in result.blocked.items():
                self.counters[f"blocked/{reason}"] += n
            self.counters["popups_closed"] += result.popups
            self.counters["downloads_refused"] += result.downloads
            return result

    async def _render_once(self, browser, url: str, body: bytes, status: int, headers: dict[str, str],
                           result: RenderResult, timeout_s: float) -> None:
        context = await browser.new_context(user_agent=self.user_agent or None, accept_downloads=False,
                                            service_workers="block", java_script_enabled=True,
                                            proxy=self._proxy_settings())
        crashed = asyncio.get_running_loop().create_future()
        traffic = _Traffic(free_hold_s=timeout_s / 2)
        routing: dict[asyncio.Task, _Hold] = {}   # sub-requests being routed, held while they wait on the crawl
        work = page = None
        try:
            page = await context.new_page()
            await page.add_init_script(_TIMERS_JS.replace("ASK_LIMIT", str(1 + self.cfg.max_repeats)))
            await page.add_init_script(_UNROUTED_APIS_JS)
            page.on("crash", lambda _: crashed.done() or crashed.set_result("renderer crashed (out of memory?)"))
            page.on("popup", lambda popup: self._close_popup(popup, result))
            page.on("download", lambda download: self._refuse_download(download, result))
            page_headers = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
            self.gate.fetched(self.gate.host_of(url))

            def refuse_all() -> asyncio.Future:
                if traffic.refusing is None:
                    traffic.refusing = asyncio.ensure_future(_quietly(self._refuse_all(context, page)))
                return traffic.refusing

            async def route(r):
                self.counters["routed"] += 1
                traffic.routed.add(r.request)
                hold = _Hold(traffic)
                task = asyncio.ensure_future(self._route(r, url, body, status, page_headers, result, hold, traffic))
                routing[task] = hold
                try:
                    await asyncio.wait({task})  # cancelled when the render ends first: not an error of the route
                finally:
                    hold.release()
                    routing.pop(task, None)
                    task.cancel()
                if result.blocked["budget"] and not traffic.spent:   # the page's next asks fail in the page
                    traffic.spent = True
                    asyncio.ensure_future(_quietly(page.evaluate(_SPENT_JS)))
                    refuse_all()
                if task.cancelled():   # answered, or Playwright's route task would wait for an answer for ever
                    await _quietly(r.abort("blockedbyclient"))
                else:
                    task.result()

            await context.route("**/*", route)

            async def refuse_socket(socket):
                # Playwright's route() never sees a WebSocket: unrouted, it would reach its host past the gate.
                # Never connected, it is closed at once: a render reads the page, it keeps no live feed.
                result.blocked["websocket"] += 1
                await _quietly(socket.close())

            await context.route_web_socket("**/*", refuse_socket)
            # requests in flight, from the page's first sight of them (robots.txt and host-delay waits included)
            page.on("request", lambda request: traffic.started())
            page.on("requestfailed",
                    lambda request: traffic.ended() or self._refused_unrouted(request, traffic, result))
            page.on("requestfinished", lambda request: traffic.ended() or request.is_navigation_request()
                    or request in traffic.from_cache or asyncio.ensure_future(self._count_bytes(request, result)))
            work = asyncio.ensure_future(self._load(page, url, result, traffic))
            done, _ = await asyncio.wait({work, crashed}, return_when=asyncio.FIRST_COMPLETED)
            if crashed in done:
                work.cancel()
                raise _PageCrashed(crashed.result())
            work.result()
        finally:
            if work is not None and not work.done():
                work.cancel()  # timed out or crashed: stop waiting on the page
            if work is not None:
                work.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning
            # the page's scripts run on while its context closes, and Playwright stops routing before the page is
            # gone: a request started then reached its host past the gate (1 render of ~25 that polled; going
            # offline first did not stop it).  So what it asks from now on is refused, and it is navigated to an
            # empty document, which ends its scripts, while its requests are still routed.  A hung page (whose
            # scripts can start nothing) would hold that navigation until Chromium gives up on it: 1 s at most.
            traffic.closing = True
            if page is not None:
                await _quietly(asyncio.wait_for(asyncio.shield(refuse_all()), _BLANK_S))
                await _quietly(asyncio.wait_for(page.goto("about:blank", wait_until="commit"), _BLANK_S))
            # the page is done with: what it still waits to ask is dropped, or each would hold its host's turn for a
            # delay, and the next render on that host would wait behind them; counted (`unsent`) when it had been let
            # through, not when it came in as the page was being left
            for task, hold in list(routing.items()):
                if hold.on and hold.admitted:
                    result.blocked["unsent"] += 1
                task.cancel()
            try:
                await asyncio.wait_for(context.close(), 5)
            except Exception:  # noqa: BLE001  (a crashed browser's contexts are gone already)
                pass

    async def _load(self, page, url: str, result: RenderResult, traffic: "_Traffic") -> None:
        await page.goto(url, wait_until="load", timeout=self.cfg.timeout_s * 1000)
        await self._settle(page, traffic)
        height = await page.evaluate(_HEIGHT_JS)
        for _ in range(self.cfg.scroll_steps):  # lazy content (infinite scroll, IntersectionObserver) loads on scroll
            if height <= 0 or await page.evaluate(_DOM_BYTES_JS) > self.cfg.max_dom_bytes:
                break  # nothing below the fold, or a DOM already too big
            await page.evaluate("() => window.scrollTo(0, document.body ? document.body.scrollHeight : 0)")
            await self._settle(page, traffic)
            grown = await page.evaluate(_HEIGHT_JS)
            if grown == height and await self._requests_within(traffic, self.cfg.scroll_grace_s):
                await self._settle(page, traffic)  # a debounced scroll handler, or a slow one, sent its request late
                grown = await page.evaluate(_HEIGHT_JS)
            if grown == height:
                break  # the scroll loaded nothing: the page is whole
            height = grown
        grows = await self._watch_until_taken(page, traffic, result)
        stopped, refused = await page.evaluate(_COUNTS_JS)
        if stopped:
            result.blocked["poll"] += stopped   # a poll's runs not made: each would have asked again
        if refused:
            result.blocked["budget"] += refused   # refused in the page once the budget was spent
        if grows:  # it grows by itself
            result.failure = "endless"
            result.detail = "the DOM keeps growing with no request to explain it (an endless feed or a runaway script)"
            return
        html = await page.content()
        data = html.encode("utf-8", errors="replace")
        if len(data) > self.cfg.max_dom_bytes:
            result.failure = "dom_too_large"
            result.detail = f"rendered DOM is {len(data)} bytes, above render.max_dom_bytes={self.cfg.max_dom_bytes}"
            return
        result.html = data

    @staticmethod
    async def _requests_within(traffic: "_Traffic", seconds: float) -> bool:
        """True as soon as a request starts or ends within `seconds`; False when none does (one in flight all along,
        a long poll, does not count)."""
        seen, deadline = traffic.count, time.monotonic() + seconds
        while traffic.count == seen and time.monotonic() < deadline:
            await asyncio.sleep(0.025)
        return traffic.count != seen

    async def _watch_until_taken(self, page, traffic: "_Traffic", result: RenderResult, looks: int = 3) -> bool:
        """Watch the loaded page until its DOM may be taken: what is still coming is let land, what never ends is not
        waited for, and the result says which (`unsettled`, `timer_wait_ms`).
        True when the DOM grows over settle_s while no request starts or ends, twice in a row (or on the last look):
        timers feeding it without end; once is a timer's one insertion (a deferred loader), and the page is looked at
        again.
        A request that starts or ends meanwhile, or since the page last settled (a loader on a timer, a loaded
        machine), is let land, and the page looked at again, `looks` times at most: the DOM is taken once it has its
        answer.  One in flight since before the page last settled (a long poll, an event stream) is not waited for.
        Either way, a DOM taken while requests are in flight or still starting is `unsettled` (counted: their answers
        may be missing from it).
        A quiet page that still shows less text than spa_text_chars and has timers that fire within timer_wait_s of
        its first quiet look (a deferred loader, hydration on a timer, an interval that checks until it may load) is
        let run them, settle and be looked at again, until it shows its text or has no timer due by then; later
        timers are not waited for, nor a page that shows its text (its timers are chrome: a consent banner, a chat
        widget, a carousel)."""
        looked, grew = 0, False
        timers_until = None   # timers are waited for until timer_wait_s after the first quiet look
        while looked < looks:
            # measured from the last settle, not from this look's start: a request that started in between (a loader
            # on a timer, as the page's height was read) is not one in flight all along, a long poll (a loaded CI
            # machine took such a DOM unsettled, the answer still on its way)
            ended, before = traffic.settled, await page.evaluate(_DOM_BYTES_JS)
            await asyncio.sleep(self.cfg.settle_s)
            after = await page.evaluate(_DOM_BYTES_JS)
            looked += 1
            if traffic.count == ended:
                # a clock or a counter ticking is not growth
                if traffic.in_flight == 0 and after > before + max(10_000, before // 20):
                    if grew:
                        return True
                    grew = True   # once may be a timer's one insertion (a deferred loader): it must grow again
                    continue
                grew = False
                if timers_until is None:
                    timers_until = time.monotonic() + self.cfg.timer_wait_s
                within_ms = (timers_until - time.monotonic()) * 1000
                if within_ms > 0:
                    due_ms = await page.evaluate(_TIMERS_DUE_JS, [self.cfg.spa_text_chars, within_ms])
                    if due_ms > 0:   # then look again, without using up a look: timers_until bounds these waits
                        looked -= 1
                        result.timer_wait_ms += round(due_ms)
                        await asyncio.sleep(due_ms / 1000 + 0.05)
                        await self._settle(page, traffic)
                        continue
                result.unsettled = traffic.in_flight > 0
                return False
            grew = False
            await self._settle(page, traffic)
        if grew:
            return True   # grew on the last look allowed, with no request to explain it
        result.unsettled = True   # still asking after every look: a poll, or a feed that never ends loading
        return False

    async def _settle(self, page, traffic: "_Traffic") -> None:
        """Wait until the page is quiet: no sub-request in flight for 50 ms after its next two frames have run what
        the last scroll or response set off, and none started meanwhile.  At most settle_s, not counting the time
        its sub-requests wait on the crawl (robots.txt, their host's delay): the crawl's 1 s delay is longer than
        settle_s, and a page that waits on it is not slow.  That time is free up to half the render's timeout in
        all, then it counts like any other: a page that polls its host keeps a request waiting on the delay.
        Not Playwright's "networkidle": it wants 500 ms with no connection, and its timeout counts the gate's waits."""
        left = self.cfg.settle_s
        while left > 0:
            tick, seen = time.monotonic(), traffic.count
            if traffic.in_flight == 0:
                await page.evaluate(_FRAMES_JS)
                await asyncio.sleep(0.05)
                if traffic.in_flight == 0 and traffic.count == seen:
                    break
            else:
                await asyncio.sleep(0.025)
            spent = time.monotonic() - tick
            if traffic.held and traffic.free_hold_s > 0:
                traffic.free_hold_s -= spent
            else:
                left -= spent
        traffic.settled = traffic.count

    async def _route(self, r, page_url: str, body: bytes, status: int, headers: dict[str, str],
                     result: RenderResult, hold: _Hold, traffic: _Traffic) -> None:
        request = r.request
        if traffic.closing:   # asked while the page is being left, after its render: neither sent nor counted
            await r.abort("blockedbyclient")
            return
        if request.is_navigation_request():
            if request.url == page_url and _is_main_frame(request) and not result.html:
                await r.fulfill(status=status, headers=headers, body=body)  # the bytes the crawl fetched: no refetch
                return
            reason = "navigation"  # popups, frames, script redirects: other pages, fetched by the crawl if linked
        else:
            reason = self._refusal(request, traffic)
            traffic.admitted += reason is None
            hold.admitted = reason is None
            if reason is None and not await self.gate.allowed(request.url, self._fetch_robots):
                reason, traffic.admitted = "robots", traffic.admitted - 1
        if reason is not None:
            hold.release()
            result.blocked[reason] += 1
            await r.abort("blockedbyclient")
            return
        cacheable = self.cfg.cache_mb > 0 and request.method == "GET" and request.resource_type in self.cfg.cache_types
        if cacheable and await self._from_cache(r, hold, traffic, result):
            return
        try:
            async with self.gate.turn(self.gate.host_of(request.url)):
                # another render of the site may have fetched it while this one waited for the host's turn
                if cacheable and await self._from_cache(r, hold, traffic, result):
                    return
                hold.release()
                result.subrequests += 1
                # the browser fetches it itself, through its proxy (Playwright's own fetch would tunnel with CONNECT)
                await r.continue_()
                response = await request.response()  # the host is free again only once it has answered
                if cacheable and response is not None:   # (and a file to keep, once its body is in)
                    await self._keep(request.url, response)
        except PlaywrightError as exc:
            result.blocked["failed"] += 1
            logger.debug("render sub-request %s failed: %s", request.url, _first_line(exc))

    async def _from_cache(self, r, hold: _Hold, traffic: _Traffic, result: RenderResult) -> bool:
        """Answer the request from the cache, if it holds the URL: not sent, so neither the budget nor the host's delay
        counts it."""
        answer = self.cache.get(r.request.url)
        if answer is None:
            return False
        hold.release()
        if hold.admitted:
            hold.admitted, traffic.admitted = False, traffic.admitted - 1
        traffic.from_cache.add(r.request)
        result.cached += 1
        self.counters["cache_hits"] += 1
        try:
            await r.fulfill(status=answer.status, headers=answer.headers, body=answer.body)
        except PlaywrightError as exc:   # the page closed meanwhile: nothing was sent, nothing is lost
            logger.debug("render sub-request %s not answered from the cache: %s", r.request.url, _first_line(exc))
        return True

    async def _keep(self, url: str, response) -> None:
        """Keep a script's or stylesheet's answer for later renders: a 200 the host did not mark no-store."""
        headers = response.headers
        if response.status != 200 or "no-store" in headers.get("cache-control", "").lower():
            return
        try:
            body = await response.body()
        except PlaywrightError:
            return   # the page left before its body arrived
        kept = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS and k.lower() != "set-cookie"}
        if self.cache.put(url, response.status, kept, body):
            self.counters["cache_stored"] += 1

    @staticmethod
    async def _refuse_all(context, page) -> None:
        """From now on every request of the page fails in the browser, never routed: once its budget is spent (a
        page that adds script elements without pause, which no in-page refusal stops, sent the pool hundreds a second
        to refuse, and a loaded machine could not take its DOM in 20 s), and as its render ends (what it asks after
        Playwright stops routing, as its context closes, would reach its host past the gate).  What fails so is
        counted as `budget` until the render ends (`_refused_unrouted`)."""
        session = await context.new_cdp_session(page)
        await session.send("Network.enable")
        await session.send("Network.setBlockedURLs", {"urls": ["*"]})

    @staticmethod
    def _refused_unrouted(request, traffic: _Traffic, result: RenderResult) -> None:
        """Count a request refused in the browser once the budget was spent (`_refuse_all`): it failed as blocked by
        the inspector, and the route never saw it (the route counts its own refusals, which CDP reports alike)."""
        if traffic.spent and not traffic.closing and request not in traffic.routed and request.failure == "inspector":
            result.blocked["budget"] += 1

    @staticmethod
    async def _count_bytes(request, result: RenderResult) -> None:
        try:
            result.subrequest_bytes += (await request.sizes())["responseBodySize"]
        except PlaywrightError:
            pass  # the page closed first: its bytes are not counted

    def _refusal(self, request, traffic: _Traffic) -> str | None:
        if traffic.admitted >= self.cfg.max_subrequests:
            return "budget"
        if request.resource_type in self.cfg.block_resource_types:
            return request.resource_type
        if "prefetch" in request.headers.get("sec-purpose", ""):
            return "prefetch"  # <link rel=prefetch>, a Link header: another page for later; the crawl fetches links
        if not request.url.startswith(("http://", "https://")):
            return "scheme"
        if request.method not in ("GET", "HEAD"):
            return "method"  # a render reads; it never posts forms or beacons
        asked = _asked_as(request.url)
        traffic.asked[asked] += 1
        if traffic.asked[asked] > 1 + self.cfg.max_repeats:
            return "repeat"  # a poll: its first answers are in the DOM, the rest would only load the host
        return None

    async def _fetch_robots(self, url: str) -> tuple[int, bytes]:
        """robots.txt for a sub-request's host, through the crawl's proxy; off the event loop (urllib blocks)."""
        return await asyncio.to_thread(_get, url, self.proxy, self.user_agent)

    def _close_popup(self, popup, result: RenderResult) -> None:
        result.popups += 1
        asyncio.ensure_future(_quietly(popup.close()))

    def _refuse_download(self, download, result: RenderResult) -> None:
        result.downloads += 1
        asyncio.ensure_future(_quietly(download.cancel()))


def _get(url: str, proxy: str, user_agent: str, limit: int = 512_000) -> tuple[int, bytes]:
    """A plain GET (stdlib: robots.txt needs no browser, and Playwright's request API tunnels even http)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}))
    request = urllib.request.Request(url, headers={"User-Agent": user_agent or "weblm-spider"})
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read(limit)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(limit)


def _asked_as(url: str, now: float | None = None) -> str:
    """The URL without its cache-busters: a query parameter named `_` (jQuery's cache: false), a random fraction, or
    a Unix time in seconds or milliseconds within a day of now, as a parameter's value or as a bare query
    (`?1733450000`, `?0.8472910385`).  Other parameters (a page, a cursor) stay.
    By hand: w3lib's url_query_cleaner drops parameters by name only, and a cache-buster is known by its value."""
    parts = urllib.parse.urlsplit(url)
    if not parts.query:
        return url
    now = time.time() if now is None else now
    busts = lambda value: bool(_RANDOM.fullmatch(value)) or _is_now(value, now)  # noqa: E731
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if not (k == "_" or busts(v) or (not v and busts(k)))]
    if len(kept) == len(pairs):
        return url   # as asked: urlencode would write a bare `?q` as `?q=`
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(kept), fragment=""))


def _is_now(value: str, now: float) -> bool:
    if not value.isdigit() or len(value) not in (10, 13):
        return False
    return abs(int(value) / (1000 if len(value) == 13 else 1) - now) < 86_400


def _is_main_frame(request) -> bool:
    try:
        return request.frame.parent_frame is None
    except PlaywrightError:  # a popup's first navigation has no frame yet: not the page being rendered
        return False


async def _quietly(coro) -> None:
    try:
        await coro
    except Exception:  # noqa: BLE001  (a popup or download that is already gone)
        pass


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
