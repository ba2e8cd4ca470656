"""RobotsTxtMiddleware that reads robots.txt status codes as RFC 9309 §2.3.1 says.

Stock Scrapy parses whatever body comes back, so a 500 error page or a 429 lets the whole host
be crawled (fails open).  RFC 9309: 4xx means no rules (allow all); 5xx and, by common practice
(StormCrawler, Nutch), 429 mean "assume complete disallow".  Scrapy still fetches, caches and
applies the rules (Protego); only the status handling differs.  A robots.txt that cannot be
fetched at all (connection refused or reset, timeout, after Scrapy's retries) is "unreachable" too,
so the host is disallowed rather than crawled without rules (stock Scrapy fails open there).

A `Crawl-delay` longer than the configured download delay becomes the host's download slot
delay, without jitter, capped at `crawl.max_crawl_delay_s` (stock Scrapy ignores Crawl-delay).
"""
from __future__ import annotations

import logging

from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler

logger = logging.getLogger(__name__)

DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"


class StatusAwareRobotsTxtMiddleware(RobotsTxtMiddleware):
    async def _parse_robots(self, response, netloc, request):
        status = response.status
        if status >= 500 or status == 429:
            logger.warning("robots.txt for %s answered %d: host treated as fully disallowed for this crawl "
                           "(RFC 9309 §2.3.1.4)", netloc, status)
            self._stats.inc_value("weblm/robots/unreachable_disallow_all")
            response = response.replace(body=DISALLOW_ALL)
        elif 400 <= status < 500:
            response = response.replace(body=b"")  # RFC 9309 §2.3.1.3: "unavailable", crawl without rules
        await super()._parse_robots(response, netloc, request)
        self._obey_crawl_delay(self._parsers[netloc], urlparse_cached(request).hostname or "")

    def _obey_crawl_delay(self, parser, host: str) -> None:
        useragent = self._robotstxt_useragent or self._default_useragent
        asked = parser.crawl_delay(useragent) if parser is not None else None
        configured = self.crawler.settings.getfloat("DOWNLOAD_DELAY")
        if not asked or asked <= configured:
            return
        cap = self.crawler.settings["WEBLM_CRAWL_CONFIG"].max_crawl_delay_s
        delay = min(asked, cap)
        if asked > cap:
            logger.warning("robots.txt for %s asks for Crawl-delay %.1f s; capped at crawl.max_crawl_delay_s=%.1f s",
                           host, asked, cap)
        # DOWNLOAD_SLOTS entries are read whenever the slot is (re)created; an existing slot is updated in place.
        downloader = self.crawler.engine.downloader
        downloader.per_slot_settings[host] = {**downloader.per_slot_settings.get(host, {}), "delay": delay, "jitter": 0}
        if host in downloader.slots:
            downloader.slots[host].delay, downloader.slots[host].jitter = delay, 0.0
        self._stats.inc_value("weblm/robots/crawl_delay_hosts")
        logger.info("%s: Crawl-delay %.2f s from robots.txt replaces the download delay of %.2f s", host, delay, configured)

    def _robots_error(self, exc, netloc):
        if isinstance(exc, IgnoreRequest):  # our own middlewares dropped the request: nothing was asked
            super()._robots_error(exc, netloc)
            return
        logger.warning("robots.txt for %s could not be fetched (%s: %s): host treated as fully disallowed "
                       "for this crawl (RFC 9309 §2.3.1.4)", netloc, type(exc).__name__, exc)
        self._stats.inc_value(f"robotstxt/exception_count/{type(exc)}")
        self._stats.inc_value("weblm/robots/unreachable_disallow_all")
        rp_dfd = self._parsers[netloc]
        self._parsers[netloc] = parser = build_from_crawler(self._parserimpl, self.crawler, DISALLOW_ALL)
        rp_dfd.callback(parser)
