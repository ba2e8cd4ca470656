"""Selective rendering in the Scrapy crawl: a downloader middleware after decompression (priority 580).

By then WarcCaptureMiddleware (950) has queued the response exactly as fetched; this one decides
(spider/render/rule.py, with the host's memory), renders the chosen pages in the pool, writes the rendered DOM
as a `conversion` record referring to that response, and hands the spider the rendered DOM to follow links in
(`response.meta["weblm_rendered_html"]`).  A failed render is counted (weblm/render/failed/<why>) and the plain
HTML goes on as if no render had been tried: the crawl never waits on a browser longer than render.timeout_s.
"""
from __future__ import annotations

import logging
import re

import lxml.html
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached

from spider.middlewares.warc_capture import RECORD_ID_META_KEY
from spider.render.config import RenderConfig
from spider.render.gate import SubrequestGate
from spider.render.memory import HostMemory
from spider.render.pool import RenderPool, RenderResult
from spider.render.rule import Decision, decide, signals as page_signals, visible_text
from spider.render.warc_record import RenderedDom
from spider.warc import warc_date

logger = logging.getLogger(__name__)

RENDERED_META_KEY = "weblm_rendered_html"
_SPACE = re.compile(r"\s+")


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
        host = urlparse_cached(request).hostname or ""
        decision = decide(page_signals(response.body), self.cfg, self.memory.verdict(host))
        self.stats.inc_value(f"weblm/render/decided/{decision.reason}")
        self.stats.inc_value("weblm/render/html_pages")
        if not decision.render:
            return response
        headers = {k.decode("latin-1"): b", ".join(v).decode("latin-1") for k, v in response.headers.items()}
        result = await self.pool.render(response.url, response.body, response.status, headers)
        self._count(result)
        if not result.ok:
            logger.info("render of %s failed (%s: %s); the plain HTML is kept", response.url, result.failure,
                        result.detail)
            return response
        gained = rendered_text_chars(result.html) - decision.signals.visible_chars
        self.memory.learn(host, gained, self.cfg.min_gain_chars)
        self.stats.inc_value("weblm/render/text_chars_gained", max(gained, 0))
        request.meta[RENDERED_META_KEY] = result.html
        await self._record(request, response, decision, result, gained)
        return response

    async def _record(self, request, response, decision: Decision, result: RenderResult, gained: int) -> None:
        thread = getattr(self.crawler, "weblm_warc_thread", None)
        refers_to = request.meta.get(RECORD_ID_META_KEY)
        if thread is None or not refers_to:
            self.stats.inc_value("weblm/render/not_recorded")
            return
        fields = {"Ms": str(round(result.seconds * 1000)), "Subrequests": str(result.subrequests),
                  "Subrequest-Bytes": str(result.subrequest_bytes), "Reason": decision.reason,
                  "Text-Gained": str(gained), "Blocked": ",".join(f"{k}={v}" for k, v in sorted(result.blocked.items()))}
        dom = RenderedDom(response.url, refers_to, result.html, warc_date(),
                          {name: value for name, value in fields.items() if value})
        try:
            queued = thread.submit_rendered(dom)
        except Exception as exc:  # noqa: BLE001  (writer stopped: the response is recorded, the DOM is not)
            logger.warning("rendered DOM of %s not recorded: %s", response.url, exc)
            self.stats.inc_value("weblm/render/not_recorded")
            return
        if queued is not None:
            await maybe_deferred_to_future(queued)
        self.stats.inc_value("weblm/render/recorded")

    def _count(self, result: RenderResult) -> None:
        self.stats.inc_value("weblm/render/renders")
        if result.ok:
            self.stats.inc_value("weblm/render/ok")
        else:
            self.stats.inc_value(f"weblm/render/failed/{result.failure}")
        self.stats.inc_value("weblm/render/subrequests", result.subrequests)
        self.stats.inc_value("weblm/render/subrequest_bytes", result.subrequest_bytes)
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
