"""The crawl counters of SEAMS §2, derived from Scrapy's stats at the end of a crawl."""
from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any, Mapping

from scrapy import signals
from scrapy.exceptions import NotConfigured

logger = logging.getLogger(__name__)


def _under(stats: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in sorted(stats.items()) if k.startswith(prefix)}


def crawl_stats(scrapy_stats: Mapping[str, Any], seeds: int) -> dict[str, Any]:
    """`pages_fetched` counts response records written (robots.txt answers and retried 5xx included)."""
    return {
        "pages_fetched": scrapy_stats.get("weblm/warc/responses", 0),
        "requests": scrapy_stats.get("downloader/request_count", 0),
        "responses_by_status": _under(scrapy_stats, "downloader/response_status_count/"),
        "robots_denied": scrapy_stats.get("weblm/robots_denied", 0),
        "errors": _under(scrapy_stats, "weblm/errors/"),
        "filtered": _under(scrapy_stats, "weblm/filtered/"),
        "warc_files": scrapy_stats.get("weblm/warc/files", 0),
        "warc_records": scrapy_stats.get("weblm/warc/records", 0),
        "warc_bytes": scrapy_stats.get("weblm/warc/bytes", 0),
        "elapsed_s": scrapy_stats.get("elapsed_time_seconds", 0.0),
        "hosts": _under(scrapy_stats, "weblm/hosts/"),
        "seeds": seeds,
        "finish_reason": scrapy_stats.get("finish_reason"),
        "scrapy": {k: (v.isoformat() if isinstance(v, (dt.datetime, dt.date)) else v)
                   for k, v in sorted(scrapy_stats.items())},
    }


class CrawlStatsExport:
    """Writes `crawl_stats(...)` as JSON to the WEBLM_STATS_FILE setting when the engine stops.

    An extension, so that `scrapy crawl weblm` and `python -m spider.crawl` both leave the file;
    engine_stopped fires after every spider_closed handler, so Scrapy's own totals are in.
    """

    def __init__(self, crawler, path: Path):
        self.crawler = crawler
        self.path = path

    @classmethod
    def from_crawler(cls, crawler):
        path = crawler.settings.get("WEBLM_STATS_FILE")
        if not path:
            raise NotConfigured("WEBLM_STATS_FILE is empty: no crawl counters file")
        ext = cls(crawler, Path(path))
        crawler.signals.connect(ext.write, signal=signals.engine_stopped)
        return ext

    def write(self) -> None:
        seeds = len(getattr(self.crawler.spider, "seeds", ()) or ())
        result = crawl_stats(self.crawler.stats.get_stats(), seeds=seeds)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(result, indent=2, default=str) + "\n")
        logger.info("crawl counters written to %s", self.path)
