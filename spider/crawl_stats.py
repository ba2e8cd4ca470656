"""The crawl counters of SEAMS §2, derived from Scrapy's stats at the end of a crawl."""
from __future__ import annotations

import datetime as dt
from typing import Any, Mapping


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
