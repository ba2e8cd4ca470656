"""spider/metrics.py: Scrapy's stats as Prometheus metrics over real HTTP, in a unit and in a running crawl."""
from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from scrapy.exceptions import NotConfigured
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawl_helpers import background_crawl, crawl_command, finished, wait_for_request
from spider.config import load_crawl_config
from spider.metrics import PrometheusMetrics, _shutdown


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of the endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def crawler_with(overrides: list[str]):
    cfg = load_crawl_config(overrides)
    return get_crawler(settings_dict={"WEBLM_CRAWL_CONFIG": cfg})


def test_the_endpoint_serves_the_stats_without_per_host_series():
    crawler = crawler_with(["metrics.port=0", "metrics.host=127.0.0.1"])
    crawler.stats = MemoryStatsCollector(crawler)
    ext = PrometheusMetrics.from_crawler(crawler)
    stats = {"downloader/request_count": 7, "downloader/response_count": 6, "downloader/response_bytes": 5000,
             "downloader/response_status_count/200": 4, "downloader/response_status_count/404": 2,
             "weblm/errors/timeout": 1, "weblm/filtered/host_budget": 3, "weblm/robots_denied": 2,
             "weblm/warc/responses": 5, "weblm/warc/revisits": 1, "weblm/warc/files": 2, "weblm/warc/bytes": 9000,
             "weblm/warc/queued": 3, "weblm/warc/files_durable": 1,
             "weblm/warc_upload/files_pending": 1, "weblm/warc_upload/buffer": "/tmp/buffer",
             "weblm/frontier/ready_hosts": 4, "weblm/frontier/queued": 120, "weblm/frontier/expired_leases": 2,
             "weblm/tdmrep/asked": 3, "weblm/tdmrep/reserved": 8,
             "weblm/hosts/a.weblm.test": 5, "start_time": "not a number"}
    for key, value in stats.items():
        crawler.stats.set_value(key, value)
    ext.start()
    try:
        port = crawler.stats.get_value("weblm/metrics/port")
        assert port and ext.url == f"http://127.0.0.1:{port}/metrics"
        samples = scrape(ext.url)
        crawler.stats.inc_value("weblm/warc/responses", 10)  # read at scrape time, not at start
        later = scrape(ext.url)
    finally:
        _shutdown(ext.server)
    assert samples[("weblm_requests_total", ())] == 7
    assert samples[("weblm_downloaded_bytes_total", ())] == 5000
    assert samples[("weblm_pages_total", ())] == 6  # responses and revisits: both are fetches archived
    assert later[("weblm_pages_total", ())] == 16
    assert samples[("weblm_responses_by_status_total", (("status", "200"),))] == 4
    assert samples[("weblm_responses_by_status_total", (("status", "404"),))] == 2
    assert samples[("weblm_errors_total", (("kind", "timeout"),))] == 1
    assert samples[("weblm_filtered_total", (("reason", "host_budget"),))] == 3
    assert samples[("weblm_warc_revisits_total", ())] == 1
    assert samples[("weblm_warc_bytes_total", ())] == 9000
    assert samples[("weblm_warc_files_durable_total", ())] == 1
    assert samples[("weblm_warc_queued", ())] == 3  # a gauge: it goes down as the writer catches up
    assert samples[("weblm_warc_upload_files_pending", ())] == 1
    assert samples[("weblm_frontier_ready_hosts", ())] == 4
    assert samples[("weblm_frontier_queued", ())] == 120
    assert samples[("weblm_frontier_expired_leases", ())] == 2
    assert samples[("weblm_tdmrep_asked_total", ())] == 3 and samples[("weblm_tdmrep_reserved_total", ())] == 8
    assert not [key for key in samples if "a.weblm.test" in str(key) or key[0].startswith("weblm_hosts")]
    assert ("weblm_process_resident_memory_bytes", ()) in samples


def test_port_minus_one_turns_the_endpoint_off():
    with pytest.raises(NotConfigured):
        PrometheusMetrics.from_crawler(crawler_with(["metrics.port=-1"]))


def test_a_port_in_use_is_an_error_in_the_log_not_a_dead_crawl(caplog):
    first = crawler_with(["metrics.port=0"])
    first.stats = MemoryStatsCollector(first)
    taken = PrometheusMetrics.from_crawler(first)
    taken.start()
    try:
        port = first.stats.get_value("weblm/metrics/port")
        second = crawler_with([f"metrics.port={port}"])
        second.stats = MemoryStatsCollector(second)
        ext = PrometheusMetrics.from_crawler(second)
        ext.start()
        assert ext.server is None and second.stats.get_value("weblm/errors/metrics_endpoint") == 1
        assert "cannot serve Prometheus metrics" in caplog.text
    finally:
        _shutdown(taken.server)


PAGE = b"<html><body><a href='/slow'>slow</a></body></html>"


def test_a_running_crawl_is_scraped_over_http(tmp_path, raw_server):
    release = threading.Event()

    def site(path: str):
        if path == "/robots.txt":
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
        if path == "/slow":
            release.wait(20)  # the crawl stays open while the test scrapes it
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(PAGE), PAGE

    server = raw_server(site)
    cmd = crawl_command(["http://metrics.weblm.test/"], tmp_path,
                        ["proxy=" + server.proxy_url(), "download_timeout_s=30", "metrics.port=0"])
    with background_crawl(cmd, tmp_path) as (proc, log):
        try:
            wait_for_request(server, "/slow", log)
            url = re.search(r"Prometheus metrics at (http://\S+)", log.read_text()).group(1)
            samples = scrape(url)
            deadline = time.monotonic() + 30
            while samples.get(("weblm_pages_total", ()), 0) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)  # the writer thread counts the home page just after its response
                samples = scrape(url)
            release.set()
            returncode = proc.wait(timeout=60)
        finally:
            release.set()
    run = finished(returncode, tmp_path, log.read_text())
    assert run.returncode == 0, run.log[-3000:]
    assert samples[("weblm_responses_by_status_total", (("status", "200"),))] >= 1  # the home page
    assert samples[("weblm_pages_total", ())] >= 2  # robots.txt and the home page, archived
    assert samples[("weblm_requests_total", ())] >= 3  # /slow is in flight
    assert url.endswith(f":{run.stats['scrapy']['weblm/metrics/port']}/metrics")
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)  # gone with the crawl
