"""Which discovered URLs may enter the frontier: scheme, depth, trap rules, the SSRF guard (the crawl's scope
of hosts is the backend's, shared by every worker).

Checked before the Bloom filter's test-and-set, so a URL refused here (too deep, say) is not marked seen and is
admitted when it is found again by a shorter path.  The per-host budget is the backend's (it counts only what
the Bloom filter admits).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import re
from urllib.parse import urlsplit

from spider.config import CrawlConfig
from spider.urlfilter import trap_reason

_YEAR = re.compile(r"(?<![0-9])(1[0-9]{3}|2[0-9]{3})(?=[-/_.](?:0?[1-9]|1[0-2])(?![0-9]))")  # a year, then a month


def is_private(address: str) -> bool:
    """Loopback, private, link-local (cloud metadata at 169.254.169.254), reserved or unspecified."""
    ip = ipaddress.ip_address(address)
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or ip.is_unspecified \
        or ip.is_multicast


class SsrfGuard:
    """Refuses targets in private address space unless `frontier.ssrf_allow` names them."""

    def __init__(self, allow: list[str]):
        self.allow = [ipaddress.ip_network(item, strict=False) for item in allow]

    def refused(self, address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return is_private(address) and not any(ip in net for net in self.allow)


class Admission:
    def __init__(self, cfg: CrawlConfig, hosts: set[str], this_year: int | None = None):
        self.cfg = cfg
        self.hosts = {h.lower() for h in hosts}
        self.guard = SsrfGuard(cfg.frontier.ssrf_allow)
        year = this_year or dt.date.today().year
        self.years = (cfg.frontier.trap_years[0], year + cfg.frontier.trap_years[1])

    def knows(self, host: str) -> bool:
        """A host this worker knows to be in the crawl's scope (its seeds', crawl.allowed_hosts); any other is
        checked against the scope the whole cluster shares, in the backend."""
        return host in self.hosts

    def reason(self, url: str, depth: int) -> str | None:
        """None when `url` may enter the frontier, else why not (a stats key)."""
        try:
            parts = urlsplit(url)
            _ = parts.port  # its ValueError: a port out of range or not a number
        except ValueError:  # an unclosed IPv6 bracket, a port that is not one: no canonical form, never fetchable
            return "malformed"
        if parts.scheme not in ("http", "https"):
            return "scheme"
        host = (parts.hostname or "").lower()
        if self.cfg.depth_limit and depth > self.cfg.depth_limit:
            return "depth"
        trap = trap_reason(url, self.cfg.max_url_length, self.cfg.max_repeated_segment)
        if trap:
            return trap
        for match in _YEAR.finditer(parts.path + ("?" + parts.query if parts.query else "")):
            if not self.years[0] <= int(match.group(1)) <= self.years[1]:
                return "calendar_trap"
        try:
            if self.guard.refused(host):
                return "ssrf_private_address"
        except ValueError:
            pass  # a hostname: checked when it is resolved (spider/frontier/dns.py)
        return None
