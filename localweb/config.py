"""The local web's settings: `conf/localweb.yaml` as a typed dataclass."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import ConfigError, load


@dataclass(frozen=True)
class LocalWebConfig:
    seed: int
    bind_host: str
    port: int
    domain: str
    pages_per_host: int
    index_page_size: int
    paragraphs_min: int
    paragraphs_max: int
    sentences_min: int
    sentences_max: int
    related_links: int
    cross_host_links: int
    mirror_exact: int
    mirror_near: int
    near_dup_changed_words: int
    missing_links: int
    gzip_every: int
    slow_page_seconds: float
    rate_limited_responses: int
    retry_after_seconds: int
    crawl_delay_seconds: float
    large_page_bytes: int
    calendar_start: str
    calendar_events_per_month: int
    js_hosts: bool            # app/spa/feed/trouble.<domain>: text only after JavaScript (localweb/js_sites.py)

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
