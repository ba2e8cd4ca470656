"""Crawl policy without a network: config, seeds, URL filter, failure names, stats shape."""
from __future__ import annotations

import pytest
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
from scrapy.http import HtmlResponse, Request
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.python.failure import Failure

from conf import ConfigError
from spider.config import load_crawl_config
from spider.crawl_stats import crawl_stats
from spider.errors import failure_kind
from spider.seeds import SeedError, read_seeds
from spider.settings import scrapy_settings
from spider.urlfilter import UrlFilter, trap_reason


def test_config_overrides_reach_scrapy_settings():
    cfg = load_crawl_config(["proxy=http://127.0.0.1:9", "download_delay_s=0.25", "warc.max_file_bytes=5000"])
    settings = scrapy_settings(cfg, "/tmp/w")
    # the frontier spaces requests and reads robots.txt itself; Scrapy's per-process versions are off
    assert settings["SCHEDULER"] == "spider.frontier.scheduler.FrontierScheduler"
    assert settings["DOWNLOAD_DELAY"] == 0 and settings["ROBOTSTXT_OBEY"] is False and settings["DEPTH_LIMIT"] == 0
    assert settings["CONCURRENT_REQUESTS_PER_DOMAIN"] == 1
    stock = scrapy_settings(load_crawl_config(["download_delay_s=0.25", "scheduler=scrapy.core.scheduler.Scheduler"]),
                            "/tmp/w")
    assert stock["DOWNLOAD_DELAY"] == 0.25 and stock["ROBOTSTXT_OBEY"] is True and stock["DEPTH_LIMIT"] == 5
    assert settings["TWISTED_REACTOR"].endswith("AsyncioSelectorReactor")
    assert "crawler-contact@" in settings["USER_AGENT"]
    assert cfg.warc.max_file_bytes == 5000 and cfg.digest() != load_crawl_config().digest()


def test_config_rejects_bad_values():
    with pytest.raises(ConfigError):
        load_crawl_config(["no_such_setting=1"])
    with pytest.raises(ValueError, match="proxy"):
        load_crawl_config(["proxy=127.0.0.1:8080"])


def test_seeds_skip_comments_and_bad_lines(tmp_path):
    path = tmp_path / "seeds.txt"
    # an unclosed IPv6 bracket and a port out of range make urlsplit raise: skipped like any bad line, not fatal
    path.write_text("# the seeds\n\nhttp://a.weblm.test/\nftp://x/\nnot a url\nhttp://[::1/\n"
                    "http://c.weblm.test:99999/\n  https://b.weblm.test/p#frag \n")
    assert read_seeds(path) == ["http://a.weblm.test/", "https://b.weblm.test/p#frag"]
    path.write_text("# nothing\n")
    with pytest.raises(SeedError, match="no http"):
        read_seeds(path)
    with pytest.raises(SeedError, match="does not exist"):
        read_seeds(tmp_path / "missing.txt")


def test_trap_rules():
    assert trap_reason("http://a/" + "x" * 3000, 2048, 3) == "url_too_long"
    assert trap_reason("http://a/cal/2024/cal/2025/x", 2048, 3) is None
    assert trap_reason("http://a/cal/x/cal/y/cal/z", 2048, 3) == "repeated_path_segment"
    assert trap_reason("http://a/a/b/c.html?q=a/a/a", 2048, 3) is None  # the query is not the path


def test_url_filter_hosts_budget_and_dedup():
    f = UrlFilter({"a.weblm.test"}, max_per_host=2, max_length=2048, max_repeated_segment=3)
    assert f.reason("http://a.weblm.test/1") is None
    assert f.reason("http://a.weblm.test/1") == "seen"
    assert f.reason("http://sub.a.weblm.test/1") == "offsite"  # exact hosts only
    assert f.reason("mailto:x@a.weblm.test") == "scheme"
    assert f.reason("http://A.weblm.test/2") is None
    assert f.reason("http://a.weblm.test/3") == "host_budget"


def test_failure_names():
    req = Request("http://a.weblm.test/x")
    resp = HtmlResponse(req.url, status=503, request=req)
    assert failure_kind(Failure(HttpError(resp, "ignored"))) == "http_503"
    assert failure_kind(Failure(DownloadTimeoutError("t"))) == "timeout"
    assert failure_kind(Failure(IgnoreRequest("Forbidden by robots.txt"))) == "robots_denied"
    assert failure_kind(Failure(KeyError("odd"))) == "KeyError"


def test_stats_follow_the_seam():
    scrapy_stats = {"weblm/warc/responses": 3, "downloader/request_count": 4,
                    "downloader/response_status_count/200": 2, "downloader/response_status_count/404": 1,
                    "weblm/errors/http_404": 1, "weblm/hosts/a.weblm.test": 3, "weblm/warc/files": 1,
                    "weblm/warc/records": 7, "weblm/warc/bytes": 900, "elapsed_time_seconds": 1.5}
    out = crawl_stats(scrapy_stats, seeds=1)
    for key in ("pages_fetched", "requests", "responses_by_status", "robots_denied", "errors",
                "warc_files", "warc_records", "warc_bytes", "elapsed_s", "hosts", "scrapy"):
        assert key in out
    assert out["responses_by_status"] == {"200": 2, "404": 1}
    assert out["errors"] == {"http_404": 1} and out["hosts"] == {"a.weblm.test": 3}
