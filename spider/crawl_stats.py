"""The crawl counters of SEAMS §2, derived from Scrapy's stats at the end of a crawl."""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from typing import Any, Mapping

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads

import storage

logger = logging.getLogger(__name__)


def _under(stats: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in sorted(stats.items()) if k.startswith(prefix)}


def crawl_stats(scrapy_stats: Mapping[str, Any], seeds: int) -> dict[str, Any]:
    """`pages_fetched` counts fetches recorded: response records (robots.txt answers and retried 5xx included)
    plus revisit records (a payload already stored, SEAMS §2)."""
    return {
        "pages_fetched": scrapy_stats.get("weblm/warc/responses", 0) + scrapy_stats.get("weblm/warc/revisits", 0),
        "warc_revisits": scrapy_stats.get("weblm/warc/revisits", 0),
        "requests": scrapy_stats.get("downloader/request_count", 0),
        "responses_by_status": _under(scrapy_stats, "downloader/response_status_count/"),
        "robots_denied": scrapy_stats.get("weblm/robots_denied", 0),
        "errors": _under(scrapy_stats, "weblm/errors/"),
        "filtered": _under(scrapy_stats, "weblm/filtered/"),
        "warc_files": scrapy_stats.get("weblm/warc/files", 0),
        "warc_records": scrapy_stats.get("weblm/warc/records", 0),
        "warc_bytes": scrapy_stats.get("weblm/warc/bytes", 0),
        "warc_files_durable": scrapy_stats.get("weblm/warc/files_durable", 0),
        "warc_upload": _under(scrapy_stats, "weblm/warc_upload/"),  # {} when warc_dir is local
        "render": _under(scrapy_stats, "weblm/render/"),  # {} when crawl.render is off (spider/render)
        "elapsed_s": scrapy_stats.get("elapsed_time_seconds", 0.0),
        "hosts": _under(scrapy_stats, "weblm/hosts/"),
        "seeds": seeds,
        "finish_reason": scrapy_stats.get("finish_reason"),
        "scrapy": {k: (v.isoformat() if isinstance(v, (dt.datetime, dt.date)) else v)
                   for k, v in sorted(scrapy_stats.items())},
    }


class CrawlStatsExport:
    """Writes `crawl_stats(...)` as JSON to the WEBLM_STATS_FILE setting (a path or a URI) when the engine stops.

    An extension, so that `scrapy crawl weblm` and `python -m spider.crawl` both leave the file;
    engine_stopped fires after every spider_closed handler, so Scrapy's own totals and the WARC uploads'
    are in.  The write runs off the reactor thread (a store may be slow); if it fails, the counters are
    kept in a local file instead, named in the error.
    """

    def __init__(self, crawler, path: str, fallback_dir: str):
        self.crawler = crawler
        self.path = path
        self.fallback_dir = fallback_dir

    @classmethod
    def from_crawler(cls, crawler):
        path = crawler.settings.get("WEBLM_STATS_FILE")
        if not path:
            raise NotConfigured("WEBLM_STATS_FILE is empty: no crawl counters file")
        ext = cls(crawler, os.fspath(path), crawler.settings.get("WEBLM_WARC_BUFFER") or "")
        crawler.signals.connect(ext.write, signal=signals.engine_stopped)
        return ext

    async def write(self) -> None:
        seeds = len(getattr(self.crawler.spider, "seeds", ()) or ())
        text = json.dumps(crawl_stats(self.crawler.stats.get_stats(), seeds=seeds), indent=2, default=str) + "\n"
        await maybe_deferred_to_future(threads.deferToThread(self._write, text))

    def _write(self, text: str) -> None:
        try:
            storage.write_text(self.path, text)
        except Exception as exc:  # noqa: BLE001  (any store error: the counters must not be lost with it)
            if not (storage.is_uri(self.path) and self.fallback_dir):
                logger.error("crawl counters could not be written to %s (%s: %s)", self.path,
                             type(exc).__name__, exc)
                return
            kept = os.path.join(self.fallback_dir, f"crawl-stats-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
                                                   f"-{os.getpid()}.json")
            storage.write_text(kept, text)
            logger.error("crawl counters could not be written to %s (%s: %s); they are in %s: copy them there "
                         "when the store answers again", self.path, type(exc).__name__, exc, kept)
            return
        logger.info("crawl counters written to %s", self.path)
