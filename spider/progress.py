"""A progress line every `crawl.progress_interval_s`: pages, rate, queue, errors, WARC bytes.

Replaces Scrapy's LogStats, whose per-minute line says nothing about the queue or the WARC output.
"""
from __future__ import annotations

import logging
import time

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet.task import LoopingCall

logger = logging.getLogger(__name__)


class ProgressLog:
    def __init__(self, crawler, interval: float):
        self.crawler = crawler
        self.interval = interval
        self.task: LoopingCall | None = None
        self.started = time.monotonic()
        self.last = (self.started, 0)

    @classmethod
    def from_crawler(cls, crawler):
        interval = crawler.settings["WEBLM_CRAWL_CONFIG"].progress_interval_s
        if interval <= 0:
            raise NotConfigured("crawl.progress_interval_s <= 0: no progress lines")
        ext = cls(crawler, interval)
        crawler.signals.connect(ext.opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.closed, signal=signals.spider_closed)
        return ext

    def opened(self, spider):
        self.started = time.monotonic()
        self.last = (self.started, 0)
        self.task = LoopingCall(self.log)
        self.task.start(self.interval, now=False)

    def log(self):
        stats = self.crawler.stats
        now = time.monotonic()
        pages = stats.get_value("weblm/warc/responses", 0) + stats.get_value("weblm/warc/revisits", 0)
        recent = (pages - self.last[1]) / max(now - self.last[0], 1e-9)
        self.last = (now, pages)
        engine = self.crawler.engine
        queued = len(engine.scheduler) if engine and engine.scheduler is not None and hasattr(engine.scheduler, "__len__") else -1
        in_flight = len(engine.downloader.active) if engine else 0
        errors = sum(v for k, v in stats.get_stats().items() if k.startswith("weblm/errors/"))
        logger.info("progress: %d pages in %.0f s (%.1f pages/s now, %.1f overall), queue %d, "
                    "in flight %d, errors %d, robots-denied %d, WARC %.1f MB",
                    pages, now - self.started, recent, pages / max(now - self.started, 1e-9), queued,
                    in_flight, errors, stats.get_value("weblm/robots_denied", 0),
                    stats.get_value("weblm/warc/bytes", 0) / 1e6)

    def closed(self, spider, reason):
        if self.task is not None and self.task.running:
            self.task.stop()
