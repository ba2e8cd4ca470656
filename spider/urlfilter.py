"""Trap rules shared by every scheduler, and the in-process URL filter of stock Scrapy's scheduler.

The frontier (spider/frontier/admission.py) applies `trap_reason` before its Bloom filter; `UrlFilter` (allowed
hosts, a seen-set, a per-host budget in one process) only serves stock Scrapy's scheduler, the benchmarks' baseline.
"""
from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url


def trap_reason(url: str, max_length: int, max_repeated_segment: int) -> str | None:
    """Why `url` looks like a crawler trap, or None.

    Rules from the field: BUbiNG rejects URLs of 2048+ characters, and both BUbiNG and Nutch
    (regex-urlfilter.txt: `-.*(/[^/]+)/[^/]+\\1/[^/]+\\1/`) reject a path whose segment repeats
    3+ times, the mark of relative-link loops such as /a/b/a/b/a/b.
    """
    if len(url) > max_length:
        return "url_too_long"
    segments = [s for s in urlsplit(url).path.split("/") if s]
    if segments and max(Counter(segments).values()) >= max_repeated_segment:
        return "repeated_path_segment"
    return None


class UrlFilter:
    """Admits each URL at most once, only on allowed hosts, at most `max_per_host` per host.

    The seen-set holds at most `max_per_host` URLs per host, so its memory is bounded by the
    budget.  It also keeps seeds from being fetched twice (Scrapy's dupefilter skips start URLs).
    """

    def __init__(self, hosts: set[str], max_per_host: int, max_length: int, max_repeated_segment: int):
        self.hosts = {h.lower() for h in hosts}
        self.max_per_host = max_per_host
        self.max_length = max_length
        self.max_repeated_segment = max_repeated_segment
        self._seen: dict[str, set[str]] = {}
        self.rejected: Counter[str] = Counter()

    def admit(self, url: str) -> bool:
        reason = self.reason(url)
        if reason is None:
            return True
        if reason != "seen":
            self.rejected[reason] += 1
        return False

    def reason(self, url: str) -> str | None:
        """None when `url` is admitted (and now counted), else why not."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return "scheme"
        # Exact hosts: Scrapy's OffsiteMiddleware and LinkExtractor(allow_domains) admit subdomains too.
        host = (parts.hostname or "").lower()
        if host not in self.hosts:
            return "offsite"
        trap = trap_reason(url, self.max_length, self.max_repeated_segment)
        if trap:
            return trap
        seen = self._seen.setdefault(host, set())
        key = canonicalize_url(url)
        if key in seen:
            return "seen"
        if len(seen) >= self.max_per_host:
            return "host_budget"
        seen.add(key)
        return None
