"""Write every fetch to WARC exactly as it came off the wire (SEAMS §2).

The request and response heads are the bytes the download handler recorded (spider/wire.py); the
body is Scrapy's, before any middleware decodes it.

Sits at 950, next to the downloader: its process_response runs before HttpCompressionMiddleware
(590) decodes the body and before RedirectMiddleware (600) turns a 3xx into a new request, so the
stored payload is the encoded body and redirects are recorded too; its process_request sees the
headers every other middleware has added (User-Agent, Accept-Encoding, cookies).  Retried 5xx/429
answers are written as well: each was a real fetch.  Cached responses (HttpCacheMiddleware, 900)
never reach it.

Where files go (SEAMS §2): into a local warc_dir directly; for a URI warc_dir into paths.warc_buffer,
then uploaded (spider/warc_upload.py).  Either way `spider.signals.warc_file_durable` is sent, on the
reactor thread, once per file and only when the file can no longer be lost.
"""
from __future__ import annotations

import logging
from pathlib import Path

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import threads

import storage
from spider.config import CrawlConfig
from spider.signals import DurableWarc, warc_file_durable
from spider.warc import (UNRECORDED_REQUEST_HEADERS, ClosedWarc, RotatingWarcWriter, request_head,
                         response_head, wire_request_head, wire_response_head)
from spider.warc_upload import WarcUploads
from spider.wire import WIRE_META_KEY

logger = logging.getLogger(__name__)


def _pairs(headers, skip=frozenset()):
    return [(name, value) for name, values in headers.items() if name.lower() not in skip
            for value in values]


class WarcCaptureMiddleware:
    def __init__(self, crawler, directory: Path, cfg: CrawlConfig, warcinfo: dict[str, str]):
        self.crawler = crawler
        self.stats = crawler.stats
        self.writer = RotatingWarcWriter(directory, cfg.warc.prefix, cfg.warc.max_file_bytes, warcinfo,
                                         on_closed=self.file_closed)
        self.uploads: WarcUploads | None = None  # set when warc_dir is a URI
        self.upload_wait_s = cfg.warc.upload_wait_s

    @classmethod
    def from_crawler(cls, crawler):
        cfg = crawler.settings["WEBLM_CRAWL_CONFIG"]
        warc_dir = crawler.settings["WEBLM_WARC_DIR"]
        buffer = crawler.settings.get("WEBLM_WARC_BUFFER")
        remote = storage.is_uri(warc_dir)
        if remote and (not buffer or storage.is_uri(buffer)):
            raise ValueError(f"WARC files go to {warc_dir}, which needs a local buffer folder to write them in "
                             f"first, but WEBLM_WARC_BUFFER is {buffer!r}; set paths.warc_buffer")
        warcinfo = {
            "http-header-user-agent": cfg.user_agent,
            "robots": "obey" if cfg.obey_robots else "ignore",
            "operator": cfg.warc.operator,
            "config-sha256": cfg.digest(),
        }
        mw = cls(crawler, Path(buffer if remote else warc_dir), cfg, warcinfo)
        if remote:
            mw.uploads = WarcUploads(buffer, warc_dir, on_durable=mw.durable_from_thread)
        crawler.signals.connect(mw.open, signal=signals.spider_opened)
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

    async def open(self, spider):
        """Send what a killed crawl left in the buffer, before this one closes a file of its own."""
        if self.uploads is not None:
            # salvaging a big .open file reads all of it: off the reactor thread; the crawl starts after it
            await maybe_deferred_to_future(threads.deferToThread(self.uploads.recover))
            self._publish()

    def file_closed(self, closed: ClosedWarc):
        """The writer closed a file (reactor thread): durable now if local, else once uploaded."""
        if self.uploads is None:
            self.durable(DurableWarc(closed.path.name, str(closed.path), closed.bytes, closed.urls,
                                     closed.record_ids))
        else:
            self.uploads.submit(closed)

    def durable_from_thread(self, warc: DurableWarc):
        """The Uploader's threads announce here; Scrapy's signals and stats belong to the reactor thread."""
        from twisted.internet import reactor

        reactor.callFromThread(self.durable, warc)

    def durable(self, warc: DurableWarc):
        self.stats.inc_value("weblm/warc/files_durable")
        self.crawler.signals.send_catch_log(signal=warc_file_durable, warc=warc)
        self._publish()

    async def close(self, *args, **kwargs):
        self.writer.close()
        self._publish()
        if self.uploads is None or self.uploads.finished:
            return
        pending = self.uploads.uploader.pending()
        if pending:
            logger.info("waiting up to %.0f s for %d WARC upload(s) to %s", self.upload_wait_s, pending,
                        self.uploads.warc_dir)
        all_sent = await maybe_deferred_to_future(threads.deferToThread(self.uploads.finish, self.upload_wait_s))
        self._publish()
        if not all_sent:
            left = self.uploads.left_in_buffer()
            logger.warning("%d WARC file(s) (%d bytes) are still in the buffer %s, not yet in %s: %s. The next "
                           "crawl started with this buffer uploads them; or copy them there yourself",
                           len(left), sum(p.stat().st_size for p in left), self.uploads.buffer,
                           self.uploads.warc_dir, ", ".join(p.name for p in left))

    def _publish(self):
        c = self.writer.counters
        self.stats.set_value("weblm/warc/files", c.files)
        self.stats.set_value("weblm/warc/records", c.records)
        self.stats.set_value("weblm/warc/responses", c.responses)
        self.stats.set_value("weblm/warc/bytes", c.bytes)
        if self.uploads is not None:
            for key, value in self.uploads.counters().items():
                self.stats.set_value(f"weblm/warc_upload/{key}", value)
