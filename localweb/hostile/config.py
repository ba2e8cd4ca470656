"""Sizes and timings of the adversarial web.

The defaults live here rather than in conf/: this web is a test fixture whose numbers are part of
what the tests and the bench pin down, not a deployment setting.  Override with `key=value`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import yaml

from conf import ConfigError, build


@dataclass(frozen=True)
class HostileConfig:
    seed: int = 9309                        # same seed, same hosts, pages and links
    domain: str = "hostile.weblm.test"      # its own subdomain of the RFC 2606 .test TLD: never clashes with localweb's hosts
    bind_host: str = "127.0.0.1"            # loopback only
    pages_per_site: int = 40                # link-rich hosts: 40 pages (depth 4) fit a 120 s crawl at 1 s per request
    related_links: int = 2                  # extra same-host links per page, to pages no deeper than itself
    small_site_pages: int = 8               # the pages behind the special hosts (robots failures, broken, calendar)
    slow_pages: int = 12                    # the slow host's pages
    slow_seconds: float = 3.0               # each slow page answers after this long
    hang_seconds: float = 3600.0            # a hanging robots.txt never answers within any crawler's timeout
    retry_after_s: int = 5                  # Retry-After on the 429 and 503 pages
    refusals: int = 2                       # first N requests to a rate-limited page are refused (Scrapy retries twice)
    limited_pages: int = 3                  # rate-limited pages per 429/503 host
    crawl_delay_s: float = 2.0              # Crawl-delay on crawl-delay.<domain>: above the bench's 1 s delay
    huge_robots_bytes: int = 600_000        # above RFC 9309's 500 KiB a crawler must parse
    enormous_bytes: int = 20_000_000        # a 20 MB HTML page: above Scrapy's 10 MiB download_maxsize
    bomb_bytes: int = 256 * 1024 * 1024     # a gzip bomb: 256 MiB of zeros in about 256 KiB on the wire
    binary_bytes: int = 200_000             # a non-HTML binary file linked like a page
    session_pages: int = 15                 # canonical pages behind the session-id links
    calendar_start: str = "2024/01"         # the trap's first month; every month links to its neighbours

    def __post_init__(self) -> None:
        if self.bind_host not in ("127.0.0.1", "::1", "localhost"):
            raise ConfigError(f"hostile web bind_host={self.bind_host!r}: it binds to loopback only")
        if min(self.pages_per_site, self.small_site_pages, self.slow_pages, self.session_pages) < 2:
            raise ConfigError("hostile web: every site needs at least 2 pages (a home page and one link)")
        year, _, month = self.calendar_start.partition("/")
        if not (year.isdigit() and month.isdigit() and 1 <= int(month) <= 12 and len(year) == 4 and len(month) == 2):
            raise ConfigError(f"hostile web calendar_start={self.calendar_start!r} is not YYYY/MM")
        if self.limited_pages >= self.pages_per_site:
            raise ConfigError("hostile web: limited_pages must be below pages_per_site")


def hostile_config(overrides: Iterable[str] = ()) -> HostileConfig:
    """The defaults plus `key=value` overrides (values read as YAML scalars); ConfigError names a bad key."""
    data = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not key=value")
        data[key.strip()] = yaml.safe_load(raw)
    return build(HostileConfig, data, where="hostile")
