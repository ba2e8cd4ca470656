"""A Prometheus endpoint per crawl worker: Scrapy's stats, read at scrape time, as `weblm_*` metrics.

Why read the stats rather than keep our own counters: every part of the crawl already counts into Scrapy's
StatsCollector (the downloader, the WARC writer, the frontier), and the crawl counters JSON (SEAMS §2) is
derived from the same numbers, so the endpoint and the JSON can never disagree.  The collector only copies
the stats dict (one C-level copy under the GIL, safe beside the reactor thread) and maps its keys:

    downloader/request_count, response_count, response_bytes   -> weblm_requests_total, weblm_responses_total,
                                                                  weblm_downloaded_bytes_total
    downloader/response_status_count/<code>                    -> weblm_responses_by_status_total{status}
    weblm/warc/responses + weblm/warc/revisits                 -> weblm_pages_total (fetches archived)
    weblm/errors/<kind>, weblm/filtered/<reason>               -> weblm_errors_total{kind}, weblm_filtered_total{reason}
    weblm/warc/<name>, weblm/warc_upload/<name>                -> weblm_warc_<name>_total,
                                                                  weblm_warc_upload_<name>_total (gauges: queued, pending)
    weblm/frontier/<name>                                      -> gauge weblm_frontier_<name>
    weblm/tdmrep/<name> (asked, found, absent, reserved, ...)  -> weblm_tdmrep_<name>_total (hosts' TDMRep files,
                                                                  and the URLs they reserve, left unfetched)

No per-host series: `weblm/hosts/<host>` would be one series per host, unbounded (crawler-anchors §4.9).
Cluster-wide numbers come from summing the workers in Prometheus.

Configuration: crawl.metrics.port (0 = any free port, -1 = no endpoint) and crawl.metrics.host.  The URL is
logged at INFO and the port put in the stats as `weblm/metrics/port`, so a test or a scraper can find it.
"""
from __future__ import annotations

import logging
import re
import socket
from typing import Any, Iterator, Mapping

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import threads

logger = logging.getLogger(__name__)

# Keys under weblm/warc/ and weblm/warc_upload/ that can go down: gauges; every other number there is a counter.
WARC_GAUGES = {"queued"}
UPLOAD_GAUGES = {"files_pending", "files_in_buffer", "bytes_in_buffer"}
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _under(stats: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    for key, value in stats.items():
        if key.startswith(prefix) and (number := _number(value)) is not None:
            yield key[len(prefix):], number


def _name(part: str) -> str:
    return _UNSAFE.sub("_", part).strip("_")


class StatsMetrics(Collector):
    """Maps a Scrapy StatsCollector to metrics at each scrape (see the module doc for the names)."""

    def __init__(self, stats):
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._snapshot()
        for key, name, doc in (
                ("downloader/request_count", "weblm_requests", "Requests sent to the downloader."),
                ("downloader/response_count", "weblm_responses", "Responses received (all statuses)."),
                ("downloader/response_bytes", "weblm_downloaded_bytes", "Response bytes received."),
                ("weblm/robots_denied", "weblm_robots_denied", "URLs not fetched because robots.txt disallows them.")):
            yield CounterMetricFamily(name, doc, value=_number(stats.get(key)) or 0.0)
        pages = sum(_number(stats.get(f"weblm/warc/{k}")) or 0.0 for k in ("responses", "revisits"))
        yield CounterMetricFamily("weblm_pages", "Fetches archived in WARC (response and revisit records).",
                                  value=pages)
        yield self._labelled("weblm_responses_by_status", "Responses by HTTP status.", "status",
                             _under(stats, "downloader/response_status_count/"))
        yield self._labelled("weblm_errors", "Failed fetches and write errors by kind.", "kind",
                             _under(stats, "weblm/errors/"))
        yield self._labelled("weblm_filtered", "URLs refused before fetching, by reason.", "reason",
                             _under(stats, "weblm/filtered/"))
        yield from self._family("weblm_warc_", _under(stats, "weblm/warc/"), WARC_GAUGES,
                                "WARC writer: weblm/warc/{} in the crawl stats.")
        yield from self._family("weblm_warc_upload_", _under(stats, "weblm/warc_upload/"), UPLOAD_GAUGES,
                                "WARC uploads: weblm/warc_upload/{} in the crawl stats.")
        yield from self._family("weblm_tdmrep_", _under(stats, "weblm/tdmrep/"), set(),
                                "TDMRep: weblm/tdmrep/{} in the crawl stats.")
        for name, value in sorted(_under(stats, "weblm/frontier/")):
            yield GaugeMetricFamily(f"weblm_frontier_{_name(name)}", f"Frontier: weblm/frontier/{name}.", value=value)

    def _snapshot(self) -> dict[str, Any]:
        for _ in range(5):  # dict.copy() does not release the GIL; a mapping of another kind might race
            try:
                return dict(self.stats.get_stats())
            except RuntimeError:
                continue
        return {}

    @staticmethod
    def _labelled(name: str, doc: str, label: str, items: Iterator[tuple[str, float]]) -> Metric:
        family = CounterMetricFamily(name, doc, labels=[label])
        for value_of_label, value in sorted(items):
            family.add_metric([value_of_label], value)
        return family

    @staticmethod
    def _family(prefix: str, items: Iterator[tuple[str, float]], gauges: set[str], doc: str) -> Iterator[Metric]:
        for key, value in sorted(items):
            if "/" in key:
                continue  # nested keys (none today) would need labels, not names
            if key in gauges:
                yield GaugeMetricFamily(prefix + _name(key), doc.format(key), value=value)
            else:
                yield CounterMetricFamily(prefix + _name(key), doc.format(key), value=value)


class PrometheusMetrics:
    """Scrapy extension: serves `StatsMetrics` (and the process's CPU and memory) over HTTP while the crawl runs."""

    def __init__(self, crawler, host: str, port: int):
        self.crawler = crawler
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatsMetrics(crawler.stats))
        ProcessCollector(namespace="weblm", registry=self.registry)
        self.server = None
        self.url = ""

    @classmethod
    def from_crawler(cls, crawler):
        cfg = crawler.settings["WEBLM_CRAWL_CONFIG"].metrics
        if cfg.port < 0:
            raise NotConfigured("crawl.metrics.port < 0: no Prometheus endpoint")
        ext = cls(crawler, cfg.host, cfg.port)
        crawler.signals.connect(ext.start, signal=signals.spider_opened)
        crawler.signals.connect(ext.stop, signal=signals.engine_stopped)
        return ext

    def start(self, spider=None) -> None:
        if self.server is not None:
            return
        try:
            self.server, port = self._serve(self.port)
        except OSError as exc:
            # an endpoint is worth less than the crawl: say so and crawl on
            logger.error("cannot serve Prometheus metrics on %s:%d (%s); the crawl goes on without them: pick "
                         "another -o metrics.port=N (0 = any free port) or -o metrics.port=-1", self.host,
                         self.port, exc)
            self.crawler.stats.inc_value("weblm/errors/metrics_endpoint")
            return
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{port}/metrics"
        self.crawler.stats.set_value("weblm/metrics/port", port)
        logger.info("Prometheus metrics at %s", self.url)

    def _serve(self, port: int):
        """prometheus_client returns its server (and so the port the OS picked); older ones return None."""
        if port == 0:
            started = start_http_server(0, addr=self.host, registry=self.registry)
            if started is not None:
                server = started[0]
                return server, server.server_address[1]
            port = _free_port(self.host)  # a small race with other processes; start_http_server raises if lost
        started = start_http_server(port, addr=self.host, registry=self.registry)
        return (started[0] if started is not None else None), port

    async def stop(self) -> None:
        """Close the endpoint off the reactor thread (shutdown waits for the server's poll loop)."""
        server, self.server = self.server, None
        if server is not None:
            await maybe_deferred_to_future(threads.deferToThread(_shutdown, server))


def _shutdown(server) -> None:
    server.shutdown()
    server.server_close()


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
