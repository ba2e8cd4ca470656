"""The spider: seeds in, links followed within the allowed hosts, every failure counted."""
from __future__ import annotations

import logging
from urllib.parse import urldefrag, urljoin, urlsplit

import scrapy
from scrapy.http import Request, TextResponse
from scrapy.linkextractors import LinkExtractor
from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap

import tdmrep

from spider.config import CrawlConfig
from spider.errors import failure_kind
from spider.frontier.outcome import fetch_failed
from spider.nofollow import agent_token, page_nofollow
from spider.seeds import read_seeds
from spider.settings import FRONTIER
from spider.signals import url_not_fetched
from spider.urlfilter import UrlFilter

logger = logging.getLogger(__name__)


class WebSpider(scrapy.Spider):
    name = "weblm"

    @classmethod
    def from_crawler(cls, crawler, seeds: list[str] | str | None = None, config: CrawlConfig | None = None,
                     **kwargs):
        """`scrapy crawl weblm [-a seeds=FILE]` passes a file name or nothing, and no config."""
        if seeds is None or isinstance(seeds, str):
            seeds = read_seeds(seeds or crawler.settings["WEBLM_SEEDS_FILE"])
        config = config or crawler.settings["WEBLM_CRAWL_CONFIG"]
        return super().from_crawler(crawler, seeds=seeds, config=config, **kwargs)

    def __init__(self, seeds: list[str], config: CrawlConfig, **kwargs):
        super().__init__(**kwargs)
        self.seeds = seeds
        hosts = {urlsplit(u).hostname for u in seeds} | set(config.allowed_hosts)
        self.scope_hosts = sorted(h for h in hosts if h)
        if config.scheduler == FRONTIER:
            # The frontier admits URLs itself (scope shared by the whole cluster, trap rules, depth, Bloom filter,
            # host budgets): a worker started with other seeds, or none, follows every host of the crawl.
            self.allowed_domains = None
            self.url_filter = None
        else:  # stock Scrapy's scheduler, the benchmarks' baseline: OffsiteMiddleware drops redirects off these hosts
            self.allowed_domains = self.scope_hosts
            self.url_filter = UrlFilter(set(self.allowed_domains), config.max_pages_per_host,
                                        config.max_url_length, config.max_repeated_segment)
        self.link_extractor = LinkExtractor(allow_domains=self.allowed_domains or (), unique=True)
        self.obey_nofollow = config.obey_nofollow
        self.agent_token = agent_token(config.user_agent)
        self.sitemap_max_urls = config.frontier.sitemap_max_urls
        self.sitemap_max_bytes = config.frontier.sitemap_max_bytes

    async def start(self):
        for url in self.seeds:
            if self._admit(url):
                yield self._request(url, {"weblm_seed": True, "depth": 0})

    def parse(self, response):
        if response.meta.get("weblm_sitemap"):   # listed in robots.txt or in a sitemap index (FrontierScheduler)
            yield from self.parse_sitemap(response)
            return
        if response.meta.get("weblm_tdmrep"):    # /.well-known/tdmrep.json: archived for extract, no links
            self.crawler.stats.inc_value(f"weblm/tdmrep/{'found' if tdmrep.declares(response.body) else 'invalid'}")
            return
        if not isinstance(response, TextResponse):
            self.crawler.stats.inc_value("weblm/parse/not_text")  # images, PDFs: archived, not followed
            return
        rendered = response.meta.get("weblm_rendered_html")  # spider/render: follow the links the browser built
        if rendered:
            response = response.replace(body=rendered, encoding="utf-8")
        try:
            if self.obey_nofollow and page_nofollow(response, self.agent_token):
                self.crawler.stats.inc_value("weblm/nofollow/pages")
                logger.debug("%s says nofollow (meta robots or X-Robots-Tag): its links are not followed", response.url)
                return
            links = self.link_extractor.extract_links(response)
        except Exception as exc:  # a page lxml cannot parse must not end the crawl
            self.crawler.stats.inc_value("weblm/errors/parse_error")
            logger.warning("could not extract links from %s (%s: %s); page kept in WARC, links lost",
                           response.url, type(exc).__name__, exc)
            return
        for link in links:
            if link.nofollow and self.obey_nofollow:   # rel="nofollow"
                self.crawler.stats.inc_value("weblm/nofollow/links")
                continue
            url = urldefrag(link.url).url  # a fragment never reaches the server: /a#x and /a#y are one fetch
            if self._admit(url):
                yield self._request(url, {"weblm_parent": response.url})

    def parse_sitemap(self, response):
        """A sitemap (sitemaps.org) or sitemap index, plain or gzipped, read with Scrapy's own parser (lxml, no
        entities resolved): its URLs are followed as links, an index's entries as sitemaps again.  At most
        `frontier.sitemap_max_urls` entries; a file past `sitemap_max_bytes` uncompressed, or no sitemap at all,
        is counted (weblm/sitemaps/invalid) and left, never an error of the crawl."""
        stats = self.crawler.stats
        problem, entries, kind = None, [], None
        try:
            body = response.body
            if body[:2] == b"\x1f\x8b":   # a .xml.gz file (a gzip Content-Encoding is already undone by Scrapy)
                body = gunzip(body, max_size=self.sitemap_max_bytes)
            if len(body) > self.sitemap_max_bytes:
                raise ValueError(f"{len(body)} bytes, over frontier.sitemap_max_bytes={self.sitemap_max_bytes}")
            sitemap = Sitemap(body)
            kind = sitemap.type
            if kind not in ("urlset", "sitemapindex"):
                raise ValueError(f"its root element is <{kind}>, not <urlset> or <sitemapindex>")
            for entry in sitemap:
                if len(entries) == self.sitemap_max_urls:
                    stats.inc_value("weblm/sitemaps/urls_over_limit")
                    logger.warning("sitemap %s lists more than %d URLs (frontier.sitemap_max_urls); the rest are "
                                   "not followed", response.url, self.sitemap_max_urls)
                    break
                if entry.get("loc"):
                    entries.append(urljoin(response.url, entry["loc"].strip()))
        except Exception as exc:  # noqa: BLE001  (lxml, gzip, a bomb: whatever the file is, the crawl goes on)
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            stats.inc_value("weblm/sitemaps/invalid")
            logger.warning("sitemap %s not read (%s); archived, no URLs followed", response.url,
                           problem)
            return
        stats.inc_value(f"weblm/sitemaps/{'indexes' if kind == 'sitemapindex' else 'read'}")
        stats.inc_value("weblm/sitemaps/urls", len(entries))
        meta = {"weblm_parent": response.url, **({"weblm_sitemap": True} if kind == "sitemapindex" else {})}
        for url in dict.fromkeys(urldefrag(u).url for u in entries):
            if self._admit(url):
                yield self._request(url, dict(meta))

    def on_error(self, failure):
        kind = failure_kind(failure)
        url = failure.request.url if hasattr(failure, "request") else "?"
        if hasattr(failure, "request") and getattr(failure.value, "response", None) is None:
            # no answer was recorded: the frontier closes the URL now (an answer is closed once its WARC is durable)
            self.crawler.signals.send_catch_log(signal=fetch_failed, request=failure.request)
            self.crawler.signals.send_catch_log(signal=url_not_fetched, url=url, reason=kind,
                                                detail=" ".join(failure.getErrorMessage().split())[:500])
        if kind == "http_304":   # a recrawl's page has not changed (spider/frontier/recrawl.py): no error, no links
            logger.debug("%s has not changed since it was last fetched (304, recorded in WARC)", url)
            return
        if kind.startswith("http_4") and getattr(failure, "request", None) is not None and (
                failure.request.meta.get("weblm_tdmrep")):   # the host declares no site-wide TDM reservation
            self.crawler.stats.inc_value("weblm/tdmrep/absent")
            return
        if kind == "robots_denied":
            self.crawler.stats.inc_value("weblm/robots_denied")
            logger.debug("robots.txt disallows %s", url)
            return
        self.crawler.stats.inc_value(f"weblm/errors/{kind}")
        if kind.startswith("http_4"):
            # Dead links are routine on the web: counted per status in the progress line and the stats.
            logger.debug("%s answered HTTP %s (recorded in WARC, links not followed)", url, kind[5:])
        elif kind.startswith("http_"):
            logger.info("%s answered HTTP %s (recorded in WARC, links not followed)", url, kind[5:])
        else:
            logger.warning("fetch failed for %s: %s (%s)", url, kind, failure.getErrorMessage())

    def _request(self, url: str, meta: dict) -> Request:
        return Request(url, callback=self.parse, errback=self.on_error, meta=meta)

    def _admit(self, url: str) -> bool:
        if self.url_filter is None:
            # The frontier's shortcut of URLs its backend already has (FrontierScheduler._known): most links of a
            # page are known (menus, footers), and each one made a Request through Scrapy's spider middlewares, the
            # engine and its signals only to be dropped by the scheduler; 28,786 links for 1,774 pages in
            # bench/crawl_throughput.py, where stock Scrapy's UrlFilter drops them here.
            known = getattr(self.crawler, "weblm_known_urls", None)
            if known is not None and url in known:
                self.crawler.stats.inc_value("weblm/filtered/seen")
                return False
            return True
        reason = self.url_filter.reason(url)
        if reason is None:
            return True
        if reason != "seen":
            self.crawler.stats.inc_value(f"weblm/filtered/{reason}")
            if reason != "offsite":
                logger.debug("not crawling %s: %s", url, reason)
        return False

