"""A DNS resolver for Scrapy with a TTL cache and the SSRF guard.

Scrapy's CachingThreadedResolver keeps an answer for the life of the process; this one for
`frontier.dns_cache_ttl_s`, and it refuses a name that resolves into private, loopback, link-local or metadata
address space (spider/frontier/admission.py) unless `frontier.ssrf_allow` names it.  The configured proxy is
always reachable: the operator chose it.  Through a proxy, target names are resolved by the proxy, which must
apply its own guard; literal-IP targets are still refused at admission.
"""
from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer
from twisted.internet.error import DNSLookupError

from spider.frontier.admission import SsrfGuard

logger = logging.getLogger(__name__)


class GuardedResolver(CachingThreadedResolver):
    def __init__(self, reactor, cache_size: int, timeout: float, guard: SsrfGuard, ttl_s: float, trusted: set[str]):
        super().__init__(reactor, 0, timeout)  # Scrapy's process-lifetime cache off: ours expires
        self.guard, self.ttl_s, self.trusted = guard, ttl_s, trusted
        # a dict with expiry times, not cachetools' TTLCache: cachetools is no dependency of the spider extra
        self._cache: dict[str, tuple[str, float]] = {}
        self._refused: set[str] = set()
        self.max_entries = cache_size

    @classmethod
    def from_crawler(cls, crawler, reactor):
        cfg = crawler.settings["WEBLM_CRAWL_CONFIG"]
        trusted = {urlsplit(cfg.proxy).hostname} if cfg.proxy else set()
        return cls(reactor, crawler.settings.getint("DNSCACHE_SIZE"), crawler.settings.getfloat("DNS_TIMEOUT"),
                   SsrfGuard(cfg.frontier.ssrf_allow), cfg.frontier.dns_cache_ttl_s, trusted)

    def getHostByName(self, name, timeout=()):
        hit = self._cache.get(name)
        if hit is not None and hit[1] > time.monotonic():
            return defer.succeed(hit[0])
        d = super().getHostByName(name, timeout)
        d.addCallback(self._checked, name)
        return d

    def _checked(self, address: str, name: str) -> str:
        if name not in self.trusted and self.guard.refused(address):
            message = (f"{name} resolves to {address}, a private/loopback/link-local address: refused by the SSRF "
                       f"guard (allow it in frontier.ssrf_allow if this crawl must reach it)")
            if name not in self._refused:  # Twisted reports the refusal as "no results": say why, once per name
                self._refused.add(name)
                logger.warning(message)
            raise DNSLookupError(message)
        if len(self._cache) >= self.max_entries:
            self._cache.clear()  # crude but bounded; a crawl touches each host's name rarely
        self._cache[name] = (address, time.monotonic() + self.ttl_s)
        return address
