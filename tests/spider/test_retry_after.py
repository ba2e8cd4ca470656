"""A 429/503 with Retry-After holds the whole host for the time asked, then the URL is retried;
an ask above crawl.max_retry_after_s is not retried, and says so."""
from __future__ import annotations

import datetime as dt

from crawl_helpers import run_crawl
from spider.middlewares.retry import retry_after_seconds

NOW = dt.datetime(2026, 11, 26, 12, 0, 0, tzinfo=dt.timezone.utc)


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds(b"120", NOW) == 120.0
    assert retry_after_seconds(" 7 ", NOW) == 7.0
    assert retry_after_seconds(b"Thu, 26 Nov 2026 12:00:30 GMT", NOW) == 30.0
    assert retry_after_seconds(b"Thu, 26 Nov 2026 11:00:00 GMT", NOW) == 0.0  # in the past: retry now
    assert retry_after_seconds(b"soon", NOW) is None
    assert retry_after_seconds(b"-5", NOW) is None
    assert retry_after_seconds(None, NOW) is None


HOLD_S = 1.0
INDEX = b"<html><body><a href='/busy'>busy</a> <a href='/later'>later</a></body></html>"
PAGE = b"<html><body>fine</body></html>"


class Site:
    """/busy answers 429 + Retry-After once, then 200; /later asks for a day's rest every time."""

    def __init__(self):
        self.busy_calls = 0

    def __call__(self, path: str):
        ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
        if path == "/":
            return ok % len(INDEX), INDEX
        if path == "/busy":
            self.busy_calls += 1
            if self.busy_calls == 1:
                return b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: %d\r\nContent-Length: 0\r\n\r\n" % HOLD_S, b""
            return ok % len(PAGE), PAGE
        if path == "/later":
            return b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 86400\r\nContent-Length: 0\r\n\r\n", b""
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""


def test_retry_after_holds_the_host_then_retries(tmp_path, raw_server):
    server = raw_server(Site())
    run = run_crawl(["http://busy.weblm.test/"], tmp_path,
                    # a delay well above loopback latency: no request to the host can leave while the 429 is in transit
                    ["proxy=" + server.proxy_url(), "download_delay_s=0.2", "randomize_delay=false", "retry_times=2"])
    assert run.returncode == 0, run.log[-3000:]
    arrivals = [(at, path) for at, _, path in server.arrivals]
    refused_at = next(at for at, path in arrivals if path == "/busy")
    after = [(at - refused_at, path) for at, path in arrivals if at > refused_at]
    assert ("/busy" in [path for _, path in after]), after  # retried...
    assert all(gap >= HOLD_S * 0.95 for gap, _ in after), after  # ...and nothing reached the host before the hold ended
    assert [path for _, path in arrivals].count("/later") == 1  # a day's rest is not waited for
    scrapy_stats = run.stats["scrapy"]
    assert scrapy_stats["weblm/retry_after/honoured"] == 1
    assert scrapy_stats["weblm/retry_after/too_long"] == 1
    assert run.stats["responses_by_status"] == {"200": 2, "404": 1, "429": 1, "503": 1}
    assert "not retried in this crawl" in run.log
