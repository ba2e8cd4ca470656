"""Write every fetch to WARC exactly as it came off the wire (SEAMS §2).

The request and response heads are the bytes the download handler recorded (spider/wire.py); the
body is Scrapy's, before any middleware decodes it.

Sits at 950, next to the downloader: its process_response runs before HttpCompressionMiddleware
(590) decodes the body and before RedirectMiddleware (600) turns a 3xx into a new request, so the
stored payload is the encoded body and redirects are recorded too; its process_request sees the
headers every other middleware has added (User-Agent, Accept-Encoding, cookies).  Retried 5xx/429
answers are written as well: each was a real fetch.  Cached responses (HttpCacheMiddleware, 900)
never reach it.
"""
from __future__ import annotations

import logging
from pathlib import Path

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached

from spider.warc import (UNRECORDED_REQUEST_HEADERS, RotatingWarcWriter, request_head, response_head,
                         wire_request_head, wire_response_head)
from spider.wire import WIRE_META_KEY

logger = logging.getLogger(__name__)


def _pairs(headers, skip=frozenset()):
    return [(name, value) for name, values in headers.items() if name.lower() not in skip
            for value in values]


class WarcCaptureMiddleware:
    def __init__(self, crawler, writer: RotatingWarcWriter):
        self.crawler = crawler
        self.stats = crawler.stats
        self.writer = writer

    @classmethod
    def from_crawler(cls, crawler):
        cfg = crawler.settings["WEBLM_CRAWL_CONFIG"]
        warcinfo = {
            "http-header-user-agent": cfg.user_agent,
            "robots": "obey" if cfg.obey_robots else "ignore",
            "operator": cfg.warc.operator,
            "config-sha256": cfg.digest(),
        }
        writer = RotatingWarcWriter(Path(crawler.settings["WEBLM_WARC_DIR"]), cfg.warc.prefix,
                                    cfg.warc.max_file_bytes, warcinfo)
        mw = cls(crawler, writer)
        # spider_closed fires on a normal end, CLOSESPIDER limits and the first SIGINT/SIGTERM;
        # engine_stopped is a second chance if the spider never opened.
        crawler.signals.connect(mw.close, signal=signals.spider_closed)
        crawler.signals.connect(mw.close, signal=signals.engine_stopped)
        return mw

    def process_response(self, request, response):
        host = urlparse_cached(request).hostname or ""
        # popped, so that a redirect's new request (a copy of this one's meta) never inherits it
        wire = request.meta.pop(WIRE_META_KEY, None)
        if wire and wire.request:
            req_head = wire_request_head(wire.request)
        else:
            req_head = request_head(request.method, request.url, _pairs(request.headers, UNRECORDED_REQUEST_HEADERS))
            self.stats.inc_value("weblm/warc/request_head_rebuilt")
        if wire and wire.response:
            resp_head = wire_response_head(wire.response)
        else:
            resp_head = response_head(getattr(response, "protocol", None), response.status, _pairs(response.headers))
            self.stats.inc_value("weblm/warc/response_head_rebuilt")
        try:
            self.writer.write_fetch(
                response.url, req_head, request.body, resp_head, response.body,
                # the address contacted (WARC 1.1 §5.12): the proxy's when the crawl goes through one
                ip_address=str(response.ip_address) if response.ip_address else None,
                truncated="disconnect" if "dataloss" in response.flags else None,
            )
        except OSError as exc:
            # A full disk must stop the crawl, not drop pages silently: fetching on is pointless.
            logger.critical("cannot write WARC record for %s: %s; stopping the crawl (free disk space "
                            "or point --warc-dir elsewhere)", response.url, exc)
            self.stats.inc_value("weblm/errors/warc_write")
            deferred_from_coro(self.crawler.engine.close_spider_async(reason="warc_write_error"))
            return response
        self.stats.inc_value(f"weblm/hosts/{host}")
        self._publish()
        return response

    def close(self, *args, **kwargs):
        self.writer.close()
        self._publish()

    def _publish(self):
        c = self.writer.counters
        self.stats.set_value("weblm/warc/files", c.files)
        self.stats.set_value("weblm/warc/records", c.records)
        self.stats.set_value("weblm/warc/responses", c.responses)
        self.stats.set_value("weblm/warc/bytes", c.bytes)
