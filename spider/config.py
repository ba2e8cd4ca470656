"""The crawl's typed configuration (`conf/crawl.yaml`)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable

from conf import as_dict, load
from spider.render.config import RenderConfig


@dataclass(frozen=True)
class WarcConfig:
    prefix: str
    max_file_bytes: int
    operator: str
    max_file_age_s: float
    queue_records: int
    metadata: bool
    not_fetched: bool
    revisit: bool
    upload_wait_s: float


@dataclass(frozen=True)
class FrontierConfig:
    url: str
    namespace: str
    partitions: int
    lease_s: float
    renew_every_s: float
    refill_every_s: float
    buffer: int
    bloom_capacity: int
    bloom_fp_rate: float
    strip_params: list[str]
    politeness_key: str
    delay_jitter: float
    max_backoff_s: float
    recrawl_after_s: float
    hot_recrawl_after_s: float
    error_recrawl_after_s: float
    conditional_recrawl: bool
    adaptive_recrawl: bool
    recrawl_min_s: float
    recrawl_max_s: float
    recrawl_inc_rate: float
    recrawl_dec_rate: float
    seed_boost: int
    robots_ttl_s: float
    robots_error_ttl_s: float
    robots_max_bytes: int
    robots_max_redirects: int
    sitemaps: bool
    tdmrep: str | bool   # respect | archive | off (YAML reads off as false; true is respect): a str once built
    sitemap_max_urls: int
    sitemap_max_bytes: int
    trap_years: list[int]
    ssrf_allow: list[str]
    dns_cache_ttl_s: float

    def __post_init__(self) -> None:
        if self.url and not self.url.startswith(("redis://", "rediss://", "redis+cluster://", "sqlite:///")):
            raise ValueError(f"frontier.url={self.url!r}: use \"\" (embedded), redis://HOST:PORT/DB, "
                             f"redis+cluster://HOST:PORT or sqlite:///PATH")
        if self.politeness_key not in ("host", "domain"):
            raise ValueError(f"frontier.politeness_key={self.politeness_key!r}: host or domain (per-IP keys need "
                             f"resolution before a URL is queued, which the frontier does not do)")
        if self.partitions < 1:
            raise ValueError("frontier.partitions must be >= 1")
        if not 0 < self.renew_every_s < self.lease_s:
            raise ValueError(f"frontier.renew_every_s ({self.renew_every_s}) must be above 0 and below "
                             f"frontier.lease_s ({self.lease_s}), or live workers would lose their leases")
        if not (0 < self.recrawl_min_s <= self.recrawl_max_s) or not (0 <= self.recrawl_inc_rate and
                                                                     0 <= self.recrawl_dec_rate < 1):
            raise ValueError(f"frontier.recrawl_min_s ({self.recrawl_min_s}) must be above 0 and at most recrawl_max_s "
                             f"({self.recrawl_max_s}); recrawl_inc_rate >= 0, 0 <= recrawl_dec_rate < 1")
        if self.delay_jitter < 0:
            raise ValueError("frontier.delay_jitter must be >= 0: jitter only lengthens a gap")
        mode = {True: "respect", False: "off"}.get(self.tdmrep, self.tdmrep)  # type: ignore[call-overload]
        if mode not in ("respect", "archive", "off"):
            raise ValueError(f"frontier.tdmrep={self.tdmrep!r}: respect (reserved pages are not fetched), archive "
                             f"(fetched and archived; the lake drops them) or off")
        object.__setattr__(self, "tdmrep", mode)
        if len(self.trap_years) != 2:
            raise ValueError("frontier.trap_years is [earliest year, years ahead], e.g. [1990, 1]")


@dataclass(frozen=True)
class MetricsConfig:
    port: int
    host: str


@dataclass(frozen=True)
class CrawlConfig:
    proxy: str
    allowed_hosts: list[str]
    user_agent: str
    obey_robots: bool
    obey_nofollow: bool
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
    frontier: FrontierConfig
    metrics: MetricsConfig
    render: RenderConfig

    def __post_init__(self) -> None:
        if not self.user_agent:
            raise ValueError("crawl.user_agent is empty: a crawler must say who it is; set it in conf/crawl.yaml")
        if self.proxy and not self.proxy.startswith(("http://", "https://")):
            raise ValueError(f"crawl.proxy={self.proxy!r} is not an http(s):// URL; use e.g. http://127.0.0.1:8080")
        if self.max_repeated_segment < 2:
            raise ValueError("crawl.max_repeated_segment must be >= 2 (1 would reject every path)")
        if self.warc.max_file_bytes <= 0:
            raise ValueError("crawl.warc.max_file_bytes must be positive")
        if self.warc.max_file_age_s <= 0 or self.warc.queue_records < 1:
            raise ValueError("crawl.warc.max_file_age_s and crawl.warc.queue_records must be positive")
        if self.warc.upload_wait_s < 0:
            raise ValueError("crawl.warc.upload_wait_s must be >= 0 (0 = do not wait; files left are sent next start)")

    def digest(self) -> str:
        """sha256 of the effective configuration, recorded in every warcinfo record."""
        return hashlib.sha256(json.dumps(as_dict(self), sort_keys=True).encode()).hexdigest()


def load_crawl_config(overrides: Iterable[str] = ()) -> CrawlConfig:
    """`conf/crawl.yaml` plus overlays and `-o key=value` overrides; ValueError says what is wrong."""
    return load("crawl", CrawlConfig, overrides)
