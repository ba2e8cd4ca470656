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

Records are built, compressed and written on one writer thread (spider/warc_thread.py), never on the
reactor: process_response only captures the fetch and queues it.  A file is closed when it reaches
crawl.warc.max_file_bytes or crawl.warc.max_file_age_s (checked at each write and by a timer, so an idle
crawl still closes it), and when the frontier sends `warc_flush_requested` (nothing left to fetch, only
acknowledgements to wait for).  With crawl.warc.revisit and a digest index on the crawler
(`crawler.weblm_digest_index`, the frontier's), a 2xx payload already stored becomes a revisit record.  A
`304 Not Modified` to a conditional recrawl (spider/frontier/recrawl.py) is a revisit record of the
server-not-modified profile, referring to the capture whose validators were sent.  With crawl.warc.not_fetched, a
URL the crawl ends without an answer (`spider.signals.url_not_fetched`) is a lone metadata record that says why.
"""
from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from warcio.statusandheaders import StatusAndHeadersParser

import storage
from spider.config import CrawlConfig
from spider.frontier.backend import DigestSeen
from spider.frontier.recrawl import META_KEY as RECRAWL_META_KEY, captured
from spider.render.warc_record import RENDERED_DOM_META_KEY
from spider.signals import DurableWarc, fetch_recorded, url_not_fetched, warc_file_durable, warc_flush_requested
from spider.warc import (UNRECORDED_REQUEST_HEADERS, ClosedWarc, DigestIndex, Fetch, NotFetched, RotatingWarcWriter,
                         Written, request_head, response_head, warc_date, wire_request_head, wire_response_head)
from spider.warc_thread import WarcWriterThread, WriterStopped
from spider.warc_upload import WarcUploads
from spider.wire import WIRE_META_KEY

logger = logging.getLogger(__name__)


def _conditional(request) -> bool:
    return bool(request.headers.get("If-None-Match") or request.headers.get("If-Modified-Since"))


def _capture_of(request) -> DigestSeen | None:
    """The capture a recrawl's validators came from, as the frontier kept it (spider/frontier/recrawl.py)."""
    found = captured(request.meta.get(RECRAWL_META_KEY), request.url)
    return DigestSeen(*found) if found else None


def _pairs(headers, skip=frozenset()):
    return [(name, value) for name, values in headers.items() if name.lower() not in skip
            for value in values]


class WarcCaptureMiddleware:
    def __init__(self, crawler, directory: Path, cfg: CrawlConfig, warcinfo: dict[str, str]):
        self.crawler = crawler
        self.stats = crawler.stats
        self.metadata = cfg.warc.metadata
        self.revisit = cfg.warc.revisit
        self.max_file_age_s = cfg.warc.max_file_age_s
        self.writer = RotatingWarcWriter(directory, cfg.warc.prefix, cfg.warc.max_file_bytes, warcinfo,
                                         on_closed=self._closed_from_thread, max_file_age_s=cfg.warc.max_file_age_s)
        self.thread = WarcWriterThread(self.writer, cfg.warc.queue_records, digests=self._digest_index,
                                       on_written=self._written_from_thread, on_error=self._failed_from_thread,
                                       call_soon=_in_reactor)
        self.uploads: WarcUploads | None = None  # set when warc_dir is a URI
        self.upload_wait_s = cfg.warc.upload_wait_s
        self._age_timer: LoopingCall | None = None
        self._stopping_crawl = False

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
        crawler.signals.connect(mw.flush_requested, signal=warc_flush_requested)
        if cfg.warc.not_fetched:
            crawler.signals.connect(mw.not_fetched, signal=url_not_fetched)
        # spider_closed fires on a normal end, CLOSESPIDER limits and the first SIGINT/SIGTERM;
        # engine_stopped is a second chance if the spider never opened.
        crawler.signals.connect(mw.close, signal=signals.spider_closed)
        crawler.signals.connect(mw.close, signal=signals.engine_stopped)
        return mw

    def process_response(self, request, response):
        """Hand the fetch to the writer thread; wait (without blocking the reactor) only when its queue is full."""
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
        date = warc_date()
        record_id = StatusAndHeadersParser.make_warc_id()  # known now, so the frontier can wait for this record
        fetch = Fetch(response.url, req_head, request.body, resp_head, response.body, date=date,
                      # the address contacted (WARC 1.1 §5.12): the proxy's when the crawl goes through one
                      ip_address=str(response.ip_address) if response.ip_address else None,
                      truncated="disconnect" if "dataloss" in response.flags else None,
                      metadata=self._metadata_fields(request, host, date) if self.metadata else None,
                      rendered=request.meta.pop(RENDERED_DOM_META_KEY, None),  # spider/render, at 970
                      record_id=record_id, conditional=_conditional(request),
                      not_modified_of=_capture_of(request))
        try:
            queued = self.thread.submit(fetch)
        except WriterStopped as exc:
            logger.warning("%s", exc)
            self.stats.inc_value("weblm/warc/not_recorded")
            return response
        self.crawler.signals.send_catch_log(signal=fetch_recorded, request=request, record_id=record_id, date=date)
        if queued is None:
            return response
        self.stats.inc_value("weblm/warc/queue_full_waits")
        return self._when_queued(queued, response)

    def not_fetched(self, url: str, reason: str, detail: str = "") -> None:
        """`url_not_fetched`: record why the URL has no answer (a full queue holds it in line, never drops it)."""
        try:
            self.thread.submit(NotFetched(url, reason, detail))
        except WriterStopped:
            logger.debug("the WARC writer is closed: %s (%s) is not recorded as not fetched", url, reason)
            self.stats.inc_value("weblm/warc/not_fetched_unrecorded")
            return
        self.stats.inc_value("weblm/warc/not_fetched")

    @staticmethod
    async def _when_queued(queued: Deferred, response):
        await maybe_deferred_to_future(queued)
        return response

    @staticmethod
    def _metadata_fields(request, host: str, date: str) -> dict[str, str]:
        """The metadata record's fields (Heritrix's names where it has one); a missing value is left out."""
        meta = request.meta
        latency = meta.get("download_latency")
        fields = {"fetchTimeMs": None if latency is None else str(round(latency * 1000)),
                  "fetchDate": date,
                  "depth": None if meta.get("depth") is None else str(meta["depth"]),
                  "via": meta.get("weblm_parent") or None,
                  "politenessKey": str(meta.get("download_slot") or host)}
        return {name: value for name, value in fields.items() if value is not None}

    def _digest_index(self) -> DigestIndex | None:
        """Asked on the writer thread at each write: the frontier's shared index, if it offers one."""
        return getattr(self.crawler, "weblm_digest_index", None) if self.revisit else None

    # --- what the writer thread reports, marshalled to the reactor thread ------------------------------
    def _written_from_thread(self, fetch: Fetch, written: Written):
        _in_reactor(self._written, fetch, written)

    def _failed_from_thread(self, fetch: Fetch | None, exc: Exception):
        _in_reactor(self._write_failed, fetch, exc)

    def _closed_from_thread(self, closed: ClosedWarc):
        _in_reactor(self.file_closed, closed)

    def _written(self, fetch: Fetch, written: Written):
        self.stats.inc_value(f"weblm/hosts/{urlsplit(fetch.url).hostname or ''}")
        self._publish()

    def _write_failed(self, fetch: Fetch | None, exc: Exception):
        what = f"WARC record for {fetch.url}" if fetch is not None else "the WARC file being closed (fsync, rename)"
        if not isinstance(exc, OSError):  # a record warcio cannot build: that fetch is lost, the crawl goes on
            logger.error("cannot write %s (%s: %s); it is not recorded, so never acknowledged", what,
                         type(exc).__name__, exc, exc_info=exc)
            self.stats.inc_value("weblm/errors/warc_record")
            return
        self.stats.inc_value("weblm/errors/warc_write")
        if self._stopping_crawl:
            logger.error("cannot write %s either: %s", what, exc)
            return
        # A full disk must stop the crawl, not drop pages silently: fetching on is pointless.
        self._stopping_crawl = True
        logger.critical("cannot write %s: %s; stopping the crawl (free disk space or point --warc-dir elsewhere)",
                        what, exc)
        if self.crawler.engine is not None:
            deferred_from_coro(self.crawler.engine.close_spider_async(reason="warc_write_error"))

    async def open(self, spider):
        """Start the age check; send what a killed crawl left in the buffer, before this one closes a file."""
        if self._age_timer is None:  # an idle crawl must still close an old file: writes alone would not
            self._age_timer = LoopingCall(self.thread.tick)
            self._age_timer.start(min(max(self.max_file_age_s / 4, 0.05), 5.0), now=False)
        if self.uploads is not None:
            # salvaging a big .open file reads all of it: off the reactor thread; the crawl starts after it
            await maybe_deferred_to_future(threads.deferToThread(self.uploads.recover))
            self._publish()

    def flush_requested(self):
        """`warc_flush_requested`: the frontier waits only for acknowledgements, so close the file now."""
        self.thread.flush()

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
        """Drain the writer's queue, close its file, then wait for the uploads; the reactor runs on meanwhile."""
        if self._age_timer is not None and self._age_timer.running:
            self._age_timer.stop()
        self.thread.stop()
        # the thread's last callFromThread (file_closed) runs before this await returns: same queue, earlier
        await maybe_deferred_to_future(threads.deferToThread(self.thread.join))
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
        self.stats.set_value("weblm/warc/revisits", c.revisits)
        if c.conversions:
            self.stats.set_value("weblm/warc/conversions", c.conversions)
        self.stats.set_value("weblm/warc/bytes", c.bytes)
        self.stats.set_value("weblm/warc/queued", self.thread.queued())
        if c.digest_index_errors:
            self.stats.set_value("weblm/warc/digest_index_errors", c.digest_index_errors)
        if self.uploads is not None:
            for key, value in self.uploads.counters().items():
                self.stats.set_value(f"weblm/warc_upload/{key}", value)


def _in_reactor(f, *args) -> None:
    """Run `f(*args)` on the reactor thread: Scrapy's signals, stats and Deferreds live there."""
    from twisted.internet import reactor

    reactor.callFromThread(f, *args)
