"""The crawl's typed configuration (`conf/crawl.yaml`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable

from conf import as_dict, load


@dataclass(frozen=True)
class WarcConfig:
    prefix: str
    max_file_bytes: int
    operator: str
    upload_wait_s: float


@dataclass(frozen=True)
class CrawlConfig:
    proxy: str
    allowed_hosts: list[str]
    user_agent: str
    obey_robots: bool
    robots_parser: str
    download_delay_s: float
    max_crawl_delay_s: float
    randomize_delay: bool
    concurrent_requests: int
    concurrent_requests_per_host: int
    depth_limit: int
    max_pages_per_host: int
    max_url_length: int
    max_repeated_segment: int
    download_timeout_s: float
    download_maxsize_bytes: int
    download_warnsize_bytes: int
    retry_enabled: bool
    retry_times: int
    retry_http_codes: list[int]
    max_retry_after_s: float
    close_after_pages: int
    close_after_seconds: int
    close_after_errors: int
    progress_interval_s: float
    log_level: str
    scheduler: str
    warc: WarcConfig

    def __post_init__(self) -> None:
        if not self.user_agent:
            raise ValueError("crawl.user_agent is empty: a crawler must say who it is; set it in conf/crawl.yaml")
        if self.proxy and not self.proxy.startswith(("http://", "https://")):
            raise ValueError(f"crawl.proxy={self.proxy!r} is not an http(s):// URL; use e.g. http://127.0.0.1:8080")
        if self.max_repeated_segment < 2:
            raise ValueError("crawl.max_repeated_segment must be >= 2 (1 would reject every path)")
        if self.warc.max_file_bytes <= 0:
            raise ValueError("crawl.warc.max_file_bytes must be positive")
        if self.warc.upload_wait_s < 0:
            raise ValueError("crawl.warc.upload_wait_s must be >= 0 (0 = do not wait; files left are sent next start)")

    def digest(self) -> str:
        """sha256 of the effective configuration, recorded in every warcinfo record."""
        return hashlib.sha256(json.dumps(as_dict(self), sort_keys=True).encode()).hexdigest()


def load_crawl_config(overrides: Iterable[str] = ()) -> CrawlConfig:
    """`conf/crawl.yaml` plus overlays and `-o key=value` overrides; ValueError says what is wrong."""
    return load("crawl", CrawlConfig, overrides)
