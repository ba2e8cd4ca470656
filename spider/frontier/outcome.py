"""How a fetch ended, told to the frontier the moment it ends.

FetchOutcomeMiddleware sits next to the downloader (960: its process_response sees the answer before any other
middleware, redirects and retries included), so the host is released as soon as its socket is free; a 429 or 503
with Retry-After blocks the host cluster-wide until then.  The spider's errback sends `fetch_failed` for a URL
that failed for good without an answer to record.
"""
from __future__ import annotations

import datetime as dt
import time

from spider.middlewares.retry import RETRY_AFTER_STATUSES, retry_after_seconds

fetch_finished = object()
"""Sent with request=, failed= (a 5xx, 429 or network error), blocked_until= (UNIX time; 0 = none), response= (the
answer as it came, before any middleware decodes it; None after a network error)."""

fetch_failed = object()
"""Sent with request= when a URL failed for good and nothing was written to WARC (no answer)."""

LONGEST_BLOCK_S = 86400.0  # a Retry-After beyond a day is read as a day: the host is asked again tomorrow


class FetchOutcomeMiddleware:
    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_response(self, request, response, spider=None):
        blocked_until = 0.0
        if response.status in RETRY_AFTER_STATUSES:
            wait = retry_after_seconds(response.headers.get(b"Retry-After"), dt.datetime.now(dt.timezone.utc))
            if wait:
                blocked_until = time.time() + min(wait, LONGEST_BLOCK_S)
        failed = response.status >= 500 or response.status == 429
        self.crawler.signals.send_catch_log(signal=fetch_finished, request=request, failed=failed,
                                            blocked_until=blocked_until, response=response)
        return response

    def process_exception(self, request, exception, spider=None):
        self.crawler.signals.send_catch_log(signal=fetch_finished, request=request, failed=True, blocked_until=0.0)
        return None
