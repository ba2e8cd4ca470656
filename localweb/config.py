"""The local web's settings: `conf/localweb.yaml` as a typed dataclass."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import ConfigError, load


@dataclass(frozen=True)
class LocalWebConfig:
    seed: int = 20240601
    bind_host: str = "127.0.0.1"
    port: int = 0
    domain: str = "weblm.test"
    pages_per_host: int = 30
    index_page_size: int = 10
    paragraphs_min: int = 4
    paragraphs_max: int = 7
    sentences_min: int = 3
    sentences_max: int = 6
    related_links: int = 4
    cross_host_links: int = 2
    mirror_exact: int = 6
    mirror_near: int = 6
    near_dup_changed_words: int = 5
    missing_links: int = 3
    gzip_every: int = 4
    slow_page_seconds: float = 6.0
    rate_limited_responses: int = 2
    retry_after_seconds: int = 1
    crawl_delay_seconds: float = 1.0
    large_page_bytes: int = 3_000_000
    calendar_start: str = "2024-06"
    calendar_events_per_month: int = 3

    def __post_init__(self) -> None:
        if self.bind_host not in ("127.0.0.1", "::1", "localhost"):
            raise ConfigError(f"localweb.bind_host={self.bind_host!r}: the local web binds to loopback only; "
                              "use 127.0.0.1")
        if self.pages_per_host < 1 or self.index_page_size < 1:
            raise ConfigError("localweb.pages_per_host and localweb.index_page_size must be at least 1")
        if not (1 <= self.paragraphs_min <= self.paragraphs_max and 1 <= self.sentences_min <= self.sentences_max):
            raise ConfigError("localweb: need 1 <= paragraphs_min <= paragraphs_max and "
                              "1 <= sentences_min <= sentences_max")
        year, _, month = self.calendar_start.partition("-")
        if not (year.isdigit() and month.isdigit() and 1 <= int(month) <= 12):
            raise ConfigError(f"localweb.calendar_start={self.calendar_start!r} is not YYYY-MM")


def load_config(overrides: Iterable[str] = ()) -> LocalWebConfig:
    """`conf/localweb.yaml` plus overlays and `key=value` overrides (see conf/__init__.py)."""
    return load("localweb", LocalWebConfig, overrides)
