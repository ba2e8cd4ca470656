"""RetryMiddleware that honours Retry-After (RFC 9110 §10.2.3) on 429 and 503 answers.

Stock Scrapy retries on its own schedule, so a host that asked for a minute's rest gets the retry
a moment later.  Here the host's download slot is held for the time asked (no request to that
host leaves before it ends), and the retry waits its turn in that slot.  An ask longer than
`crawl.max_retry_after_s` is not retried: the answer is kept (WARC record, error count) and the
URL given up with a message.  Everything else is Scrapy's retry logic, unchanged.
"""
from __future__ import annotations

import datetime as dt
import logging
from email.utils import parsedate_to_datetime
from time import monotonic

from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.utils.asyncio import call_later
from scrapy.utils.response import response_status_message

logger = logging.getLogger(__name__)

RETRY_AFTER_STATUSES = {429, 503}


def retry_after_seconds(value: bytes | str | None, now: dt.datetime) -> float | None:
    """Seconds to wait from a Retry-After value (delay-seconds or HTTP-date); None if absent or unreadable."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)  # stdlib parses RFC 5322/IMF-fixdate, the HTTP-date forms
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return max(0.0, (when - now).total_seconds())


class PoliteRetryMiddleware(RetryMiddleware):
    @classmethod
    def from_crawler(cls, crawler):
        mw = super().from_crawler(crawler)
        mw.max_wait = crawler.settings["WEBLM_CRAWL_CONFIG"].max_retry_after_s
        mw._held: dict[str, tuple[float, float, float]] = {}  # slot -> (its delay, its jitter, held until)
        return mw

    def process_response(self, request, response, spider=None):
        if (request.meta.get("dont_retry") or response.status not in RETRY_AFTER_STATUSES
                or response.status not in self.retry_http_codes):
            return super().process_response(request, response)
        wait = retry_after_seconds(response.headers.get(b"Retry-After"), dt.datetime.now(dt.timezone.utc))
        if wait is None:
            return super().process_response(request, response)
        stats = self.crawler.stats
        if wait > self.max_wait:
            stats.inc_value("weblm/retry_after/too_long")
            logger.warning("%s answered %d with Retry-After %.0f s, above crawl.max_retry_after_s=%.0f s: "
                           "not retried in this crawl (answer kept in WARC)", request.url, response.status,
                           wait, self.max_wait)
            return response
        retry = self._retry(request, response_status_message(response.status))
        if retry is None:  # out of retries: Scrapy has logged the give-up
            return response
        self._hold_slot(request, wait)
        stats.inc_value("weblm/retry_after/honoured")
        logger.info("%s answered %d with Retry-After %.1f s: host held that long, then retried",
                    request.url, response.status, wait)
        return retry

    def _hold_slot(self, request, wait: float) -> None:
        """No request leaves the request's download slot for `wait` seconds from now."""
        downloader = self.crawler.engine.downloader
        key = request.meta.get(downloader.DOWNLOAD_SLOT) or downloader.get_slot_key(request)
        slot = downloader.slots.get(key)
        if slot is None:
            return
        now = monotonic()
        delay, jitter, until = self._held.get(key, (slot.delay, slot.jitter, now))
        until = max(until, now + wait)
        self._held[key] = (delay, jitter, until)
        # The downloader sends the next request once `delay` has passed since `lastseen`.
        slot.delay, slot.jitter, slot.lastseen = until - now, 0.0, now
        call_later(until - now, self._release, key)

    def _release(self, key: str) -> None:
        held = self._held.get(key)
        if held is None or monotonic() < held[2] - 1e-3:  # a later hold extended it
            return
        del self._held[key]
        slot = self.crawler.engine.downloader.slots.get(key)
        if slot is not None:
            slot.delay, slot.jitter = held[0], held[1]
