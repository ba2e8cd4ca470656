"""The crawl's typed configuration (`conf/crawl.yaml`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Iterable

from conf import as_dict, load


@dataclass(frozen=True)
class WarcConfig:
    prefix: str = "weblm"
    max_file_bytes: int = 1_000_000_000
    operator: str = ""


@dataclass(frozen=True)
class CrawlConfig:
    proxy: str = ""
    allowed_hosts: list[str] = field(default_factory=list)
    user_agent: str = ""
    obey_robots: bool = True
    robots_parser: str = "scrapy.robotstxt.ProtegoRobotParser"
    download_delay_s: float = 1.0
    max_crawl_delay_s: float = 30.0
    randomize_delay: bool = True
    concurrent_requests: int = 16
    concurrent_requests_per_host: int = 1
    depth_limit: int = 5
    max_pages_per_host: int = 200
    max_url_length: int = 2048
    max_repeated_segment: int = 3
    download_timeout_s: float = 30.0
    download_maxsize_bytes: int = 10 * 1024 * 1024
    download_warnsize_bytes: int = 2 * 1024 * 1024
    retry_enabled: bool = True
    retry_times: int = 2
    retry_http_codes: list[int] = field(default_factory=list)
    max_retry_after_s: float = 120.0
    close_after_pages: int = 0
    close_after_seconds: int = 0
    close_after_errors: int = 0
    progress_interval_s: float = 10.0
    log_level: str = "INFO"
    scheduler: str = "scrapy.core.scheduler.Scheduler"
    warc: WarcConfig = field(default_factory=WarcConfig)

    def __post_init__(self) -> None:
        if not self.user_agent:
            raise ValueError("crawl.user_agent is empty: a crawler must say who it is; set it in conf/crawl.yaml")
        if self.proxy and not self.proxy.startswith(("http://", "https://")):
            raise ValueError(f"crawl.proxy={self.proxy!r} is not an http(s):// URL; use e.g. http://127.0.0.1:8080")
        if self.max_repeated_segment < 2:
            raise ValueError("crawl.max_repeated_segment must be >= 2 (1 would reject every path)")
        if self.warc.max_file_bytes <= 0:
            raise ValueError("crawl.warc.max_file_bytes must be positive")

    def digest(self) -> str:
        """sha256 of the effective configuration, recorded in every warcinfo record."""
        return hashlib.sha256(json.dumps(as_dict(self), sort_keys=True).encode()).hexdigest()


def load_crawl_config(overrides: Iterable[str] = ()) -> CrawlConfig:
    """`conf/crawl.yaml` plus overlays and `-o key=value` overrides; ValueError says what is wrong."""
    return load("crawl", CrawlConfig, overrides)
