"""Scrapy settings built from the typed crawl configuration; the only place they are set."""
from __future__ import annotations

from typing import Any

from spider.config import CrawlConfig

FRONTIER = "spider.frontier.scheduler.FrontierScheduler"


def scrapy_settings(cfg: CrawlConfig, warc_dir: str, stats_file: str = "",
                    seeds_file: str = "", warc_buffer: str = "", local_dir: str = "") -> dict[str, Any]:
    frontier = cfg.scheduler == FRONTIER
    return {
        "BOT_NAME": "weblm",
        "SPIDER_MODULES": ["spider.web_spider"],  # `scrapy crawl weblm` finds WebSpider here (scrapy.cfg)
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "SCHEDULER": cfg.scheduler,
        "USER_AGENT": cfg.user_agent,
        # The frontier fetches robots.txt once for the cluster and spaces requests per host itself; Scrapy's
        # per-process RobotsTxtMiddleware and slot delays only serve stock Scrapy's scheduler (the bench baseline).
        "ROBOTSTXT_OBEY": cfg.obey_robots and not frontier,
        "ROBOTSTXT_PARSER": cfg.robots_parser,
        "DOWNLOAD_DELAY": 0.0 if frontier else cfg.download_delay_s,
        "DOWNLOAD_DELAY_JITTER": 0.5 if cfg.randomize_delay and not frontier else 0.0,  # stock Scrapy's +-50%
        "CONCURRENT_REQUESTS": cfg.concurrent_requests,
        "CONCURRENT_REQUESTS_PER_DOMAIN": cfg.concurrent_requests_per_host,  # slots are keyed on the hostname
        "DEPTH_LIMIT": 0 if frontier else cfg.depth_limit,  # the frontier refuses deep URLs before marking them seen
        "DOWNLOAD_TIMEOUT": cfg.download_timeout_s,
        "DOWNLOAD_MAXSIZE": cfg.download_maxsize_bytes,
        "DOWNLOAD_WARNSIZE": cfg.download_warnsize_bytes,
        "RETRY_ENABLED": cfg.retry_enabled,
        "RETRY_TIMES": cfg.retry_times,
        "RETRY_HTTP_CODES": list(cfg.retry_http_codes),
        "CLOSESPIDER_PAGECOUNT": cfg.close_after_pages,
        "CLOSESPIDER_TIMEOUT": cfg.close_after_seconds,
        "CLOSESPIDER_ERRORCOUNT": cfg.close_after_errors,
        "LOG_LEVEL": cfg.log_level,
        "TELNETCONSOLE_ENABLED": False,  # no listening ports a crawl does not need
        "TWISTED_DNS_RESOLVER": "spider.frontier.dns.GuardedResolver",  # TTL cache and SSRF guard
        "DOWNLOAD_HANDLERS": {  # Scrapy's HTTP/1.1 handler, recording the heads' wire bytes for WARC
            "http": "spider.wire.WireRecordingDownloadHandler",
            "https": "spider.wire.WireRecordingDownloadHandler",
        },
        "DOWNLOADER_MIDDLEWARES": {
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
            "spider.middlewares.retry.PoliteRetryMiddleware": 550,  # same place; honours Retry-After
            "spider.middlewares.proxy.ProxyMiddleware": 740,  # before HttpProxyMiddleware (750)
            "spider.middlewares.warc_capture.WarcCaptureMiddleware": 950,  # next to the downloader
            "spider.frontier.outcome.FetchOutcomeMiddleware": 960,  # first to see how a fetch ended
            "spider.render.middleware.RenderMiddleware": 970,  # renders before the host is released (crawl.render)
        },
        "EXTENSIONS": {
            "scrapy.extensions.logstats.LogStats": None,  # replaced by ProgressLog
            "scrapy.extensions.remote_control.RemoteControl": None,  # a listening port the crawl does not need
            "spider.progress.ProgressLog": 500,
            "spider.crawl_stats.CrawlStatsExport": 510,
            "spider.metrics.PrometheusMetrics": 520,  # crawl.metrics.port: a /metrics endpoint per worker
        },
        "WEBLM_CRAWL_CONFIG": cfg,
        "WEBLM_WARC_DIR": warc_dir,  # a local folder, or a URI: files are then written in WEBLM_WARC_BUFFER and uploaded
        "WEBLM_WARC_BUFFER": warc_buffer,  # local folder; used only when WEBLM_WARC_DIR is a URI
        "WEBLM_STATS_FILE": stats_file,  # crawl counters JSON (SEAMS §2); "" = none
        "WEBLM_SEEDS_FILE": seeds_file,  # the seeds when the spider is given none (`scrapy crawl weblm`)
        "WEBLM_LOCAL_DIR": local_dir,  # paths.local: the embedded frontier's database lives under it
    }
