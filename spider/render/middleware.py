"""Selective rendering in the Scrapy crawl: a downloader middleware next to the downloader (priority 970).

It sees each answer first, before FetchOutcomeMiddleware (960) tells the frontier the fetch has ended: a render is
part of its page's fetch, so the host stays held, cluster-wide, until the render and its sub-requests are over,
and the frontier's delay for the host counts from then.  It decides (spider/render/rule.py, with the host's
memory) on the decoded body (Scrapy's HttpCompressionMiddleware decodes a copy; the answer itself goes on
encoded, as the WARC capture at 950 must store it), renders the chosen pages in the pool, and hands the rendered
DOM to the WARC capture (a `conversion` record in the same fetch, referring to the response) and to the spider
(`response.meta["weblm_rendered_html"]`: links are followed in the rendered DOM).  A failed render is counted
(weblm/render/failed/<why>) and the plain HTML goes on as if no render had been tried: the crawl never waits on
a browser longer than render.timeout_s.
Not scrapy-playwright: its browser does the fetch, so the rule could not read the plain answer, nor WARC its wire bytes.
"""
from __future__ import annotations

import logging

import lxml.html
from scrapy import signals
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse
from scrapy.statscollectors import DummyStatsCollector
from scrapy.utils.httpobj import urlparse_cached

from spider.render.config import RenderConfig
from spider.render.gate import SubrequestGate
from spider.render.memory import HostMemory
from spider.render.pool import RenderPool, RenderResult
from spider.render.rule import Decision, decide, signals as page_signals, visible_text
from spider.render.warc_record import RENDERED_DOM_META_KEY, RenderedDom

logger = logging.getLogger(__name__)

RENDERED_META_KEY = "weblm_rendered_html"  # request.meta: the rendered DOM, for the spider's link extraction


def rendered_text_chars(html: bytes) -> int:
    try:
        return len(visible_text(lxml.html.document_fromstring(html)))
    except Exception:  # noqa: BLE001  (an unparsable DOM adds nothing)
        return 0


class RenderMiddleware:
    def __init__(self, crawler, cfg: RenderConfig, pool: RenderPool):
        self.crawler = crawler
        self.stats = crawler.stats
        self.cfg = cfg
        self.pool = pool
        self.memory = HostMemory(cfg.host_render_after, cfg.host_stop_after, cfg.host_memory_size)
        # Scrapy's own decoder, on a copy of the body; its counters go to a sink, the real pass at 590 counts once
        self.decoder = HttpCompressionMiddleware(crawler=crawler)
        self.decoder.stats = DummyStatsCollector(crawler)

    @classmethod
    def from_crawler(cls, crawler):
        crawl = crawler.settings["WEBLM_CRAWL_CONFIG"]
        if not crawl.render.enabled:
            raise NotConfigured("crawl.render.enabled is false")
        f = crawl.frontier
        gate = SubrequestGate(crawl.download_delay_s, crawl.user_agent, f.robots_ttl_s, f.robots_error_ttl_s,
                              f.robots_max_bytes, obey_robots=crawl.obey_robots)
        mw = cls(crawler, crawl.render, RenderPool(crawl.render, gate, crawl.proxy, crawl.user_agent))
        crawler.signals.connect(mw.close, signal=signals.spider_closed)
        return mw

    async def process_response(self, request, response, spider=None):
        if not isinstance(response, HtmlResponse) or response.status != 200:
            return response
        try:
            decoded = self.decoder.process_response(request, response)
        except Exception as exc:  # noqa: BLE001  (undecodable: the pass at 590 reports it; nothing to render)
            self.stats.inc_value("weblm/render/undecodable")
            logger.debug("not rendering %s: body not decodable (%s)", response.url, exc)
            return response
        host = urlparse_cached(request).hostname or ""
        decision = decide(page_signals(decoded.body), self.cfg, self.memory.verdict(host))
        self.stats.inc_value(f"weblm/render/decided/{decision.reason}")
        self.stats.inc_value("weblm/render/html_pages")
        if not decision.render:
            return response
        headers = {k.decode("latin-1"): b", ".join(v).decode("latin-1") for k, v in decoded.headers.items()}
        result = await self.pool.render(response.url, decoded.body, response.status, headers)
        self._count(result)
        if not result.ok:
            logger.info("render of %s failed (%s: %s); the plain HTML is kept", response.url, result.failure,
                        result.detail)
            return response
        gained = rendered_text_chars(result.html) - decision.signals.visible_chars
        self.memory.learn(host, gained, self.cfg.min_gain_chars)
        self.stats.inc_value("weblm/render/text_chars_gained", max(gained, 0))
        request.meta[RENDERED_META_KEY] = result.html
        request.meta[RENDERED_DOM_META_KEY] = RenderedDom(result.html, self._fields(decision, result, gained))
        self.stats.inc_value("weblm/render/recorded")
        return response

    @staticmethod
    def _fields(decision: Decision, result: RenderResult, gained: int) -> dict[str, str]:
        fields = {"Ms": str(round(result.seconds * 1000)), "Subrequests": str(result.subrequests),
                  "Cached": str(result.cached) if result.cached else "",
                  "Subrequest-Bytes": str(result.subrequest_bytes), "Reason": decision.reason,
                  "Text-Gained": str(gained), "Unsettled": "true" if result.unsettled else "",
                  "Timer-Wait-Ms": str(result.timer_wait_ms) if result.timer_wait_ms else "",
                  "Blocked": ",".join(f"{k}={v}" for k, v in sorted(result.blocked.items()))}
        return {name: value for name, value in fields.items() if value}

    def _count(self, result: RenderResult) -> None:
        self.stats.inc_value("weblm/render/renders")
        if result.ok:
            self.stats.inc_value("weblm/render/ok")
            if result.unsettled:   # kept, but taken with requests in flight or still starting
                self.stats.inc_value("weblm/render/unsettled")
            if result.timer_wait_ms:   # kept after waiting for the page's timers (a deferred loader)
                self.stats.inc_value("weblm/render/timer_waits")
                self.stats.inc_value("weblm/render/timer_wait_ms", result.timer_wait_ms)
        else:
            self.stats.inc_value(f"weblm/render/failed/{result.failure}")
        self.stats.inc_value("weblm/render/subrequests", result.subrequests)
        self.stats.inc_value("weblm/render/subrequest_bytes", result.subrequest_bytes)
        if result.cached:   # scripts and stylesheets a render took from the pool's cache, not from their host
            self.stats.inc_value("weblm/render/cached", result.cached)
        self.stats.inc_value("weblm/render/seconds_ms", round(result.seconds * 1000))
        for reason, n in result.blocked.items():
            self.stats.inc_value(f"weblm/render/blocked/{reason}", n)
        for name in ("popups", "downloads"):
            if getattr(result, name):
                self.stats.inc_value(f"weblm/render/{name}_refused", getattr(result, name))
        if result.attempts > 1:
            self.stats.inc_value("weblm/render/retried_after_browser_crash")
        for name in ("browser_launches", "browser_restarts", "browser_crashes"):
            self.stats.set_value(f"weblm/render/{name}", self.pool.counters[name])

    async def close(self, spider=None):
        await self.pool.close()
