"""robots.txt per RFC 9309, cached once for the whole cluster in the frontier backend.

How an answer becomes a record (§2.3.1): 2xx → the body, parsed with Protego (Google's rules: wildcards, longest
match); 4xx → no rules ("unavailable": allow all); 5xx, 429 and network errors → "unreachable": disallow all, and
ask again after `frontier.robots_error_ttl_s`; more than `robots_max_redirects` redirects → unavailable (§2.3.1.2).
A record is used for at most `robots_ttl_s` (24 h, §2.4).  Only the first `robots_max_bytes` are parsed (§2.5).
With `frontier.tdmrep: respect` the host's TDMRep file is asked right after robots.txt and rides in the same record.
"""
from __future__ import annotations

from dataclasses import dataclass

from protego import Protego

import tdmrep
from spider.frontier.backend import RobotsRecord


@dataclass
class Robots:
    """A record with its parsed rules, kept by each worker until it expires."""
    record: RobotsRecord
    parser: Protego | None

    def allowed(self, url: str, user_agent: str) -> bool:
        if self.record.status == "disallow_all":
            return False
        if self.record.status == "allow_all" or self.parser is None:
            return True
        return self.parser.can_fetch(url, user_agent)

    def reserved(self, url: str) -> bool:
        """Whether the host's TDMRep file, asked with this robots.txt (`record.tdm`), reserves text and data mining
        on `url` (the rules: tdmrep/)."""
        return bool(self.record.tdm) and tdmrep.reserved(self.record.tdm, url)

    def sitemaps(self) -> list[str]:
        """The file's `Sitemap:` URLs (they apply to every user agent), as written."""
        return [url.strip() for url in self.parser.sitemaps if url.strip()] if self.parser is not None else []

    def crawl_delay(self, user_agent: str) -> float | None:
        if self.parser is None:
            return None
        delay = self.parser.crawl_delay(user_agent)
        return float(delay) if delay is not None else None


def parse(record: RobotsRecord) -> Robots:
    parser = None
    if record.status == "parsed":
        # undecodable bytes must not hide the rules around them: Protego reads str
        parser = Protego.parse(record.body.decode("utf-8", errors="replace"))
    return Robots(record, parser)


def from_answer(status: int, body: bytes, now: float, ttl_s: float, error_ttl_s: float, max_bytes: int) -> RobotsRecord:
    if 200 <= status < 300:
        return RobotsRecord("parsed", body[:max_bytes], now, now + ttl_s, f"HTTP {status}")
    if status == 429 or status >= 500:
        return RobotsRecord("disallow_all", b"", now, now + error_ttl_s, f"HTTP {status}")
    return RobotsRecord("allow_all", b"", now, now + ttl_s, f"HTTP {status}")


def from_error(kind: str, now: float, ttl_s: float, error_ttl_s: float) -> RobotsRecord:
    if kind == "redirect_limit":  # §2.3.1.2: the crawler MAY assume robots.txt is unavailable
        return RobotsRecord("allow_all", b"", now, now + ttl_s, kind)
    return RobotsRecord("disallow_all", b"", now, now + error_ttl_s, kind)
