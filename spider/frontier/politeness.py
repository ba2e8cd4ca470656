"""When a host may be asked again: the largest of the configured delay, its robots.txt Crawl-delay (capped), a
Retry-After block, and exponential backoff on consecutive errors.  Jitter only ever lengthens a gap.

Pure functions of (state, outcome, now): the scheduler calls them when a fetch ends and stores the result in the
backend, so every worker of the cluster sees the same record.
"""
from __future__ import annotations

import ipaddress
import random
from dataclasses import replace
from functools import lru_cache
from urllib.parse import urlsplit

from spider.config import CrawlConfig
from spider.frontier.backend import HostState


def politeness_key(url: str, mode: str) -> str:
    """The key one delay applies to: the hostname (default) or its registered domain.

    `domain`: the label under the public suffix (example.co.uk, bit.ly for docs.bit.ly, city.kawasaki.jp), by the
    ICANN section of the Public Suffix List that tldextract's wheel carries (never downloaded at run time).  A host
    under no listed suffix (`.test`, `.internal`, one label) keeps its last two labels.
    """
    host = (urlsplit(url).hostname or "").lower()
    if mode != "domain" or _is_ip(host):
        return host
    return _public_suffixes()(host).top_domain_under_public_suffix or ".".join(host.split(".")[-2:])


@lru_cache(maxsize=1)
def _public_suffixes():
    import tldextract  # Scrapy's own dependency (its cookie middleware reads the same list)

    # suffix_list_urls=(): the list bundled in the wheel, no fetch; cache_dir=None: nothing written under ~/.cache
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, fallback_to_snapshot=True)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def effective_delay(cfg: CrawlConfig, state: HostState) -> float:
    """The configured delay, or the robots.txt Crawl-delay stored for the host when that is longer."""
    return max(cfg.download_delay_s, state.delay_s)


def after_fetch(cfg: CrawlConfig, state: HostState, now: float, failed: bool, blocked_until: float = 0.0,
                rng: random.Random = random._inst) -> tuple[float, HostState]:  # type: ignore[attr-defined]
    """(next-allowed time, new state) once a fetch ended at `now`.  `failed`: a 5xx, 429 or network error."""
    errors = state.errors + 1 if failed else 0
    gap = effective_delay(cfg, state)
    if errors:
        gap = min(max(gap, 1.0) * 2 ** (errors - 1), max(cfg.frontier.max_backoff_s, gap))
    if cfg.randomize_delay and gap > 0:
        gap *= 1 + rng.uniform(0, cfg.frontier.delay_jitter)
    blocked = max(state.blocked_until, blocked_until)
    return max(now + gap, blocked), replace(state, errors=errors, blocked_until=blocked)


def with_crawl_delay(cfg: CrawlConfig, state: HostState, asked: float | None) -> HostState:
    """A robots.txt Crawl-delay above the configured delay becomes the host's delay, capped."""
    delay = min(asked, cfg.max_crawl_delay_s) if asked and asked > cfg.download_delay_s else -1.0
    return replace(state, delay_s=delay)
