"""The crawl's own Scrapy signals, for components that act on what the crawl has made durable.

A frontier acknowledges a URL's lease only once its fetch cannot be lost (SEAMS §2):
`crawler.signals.connect(handler, signal=warc_file_durable)` in its `from_crawler`, then
`handler(warc: DurableWarc)` is called on the reactor thread once per WARC file.  The last files become
durable while `spider_closed` runs (the writer closes there and the crawl waits for its uploads), which
Scrapy sends after the scheduler's `close()`: a frontier keeps taking acknowledgements until `engine_stopped`.
"""
from __future__ import annotations

from dataclasses import dataclass

warc_file_durable = object()
"""Sent with `warc=DurableWarc(...)` when a WARC file's final home holds it: for a local warc_dir once the
file is fsynced and renamed (and the rename fsynced); for object storage once the upload is complete and
its size checked there.  Never before, so a handler may forget everything the file holds."""

fetch_recorded = object()
"""Sent with `request=`, `record_id=` and `date=` on the reactor thread when a fetch has been handed to the WARC
writer: `record_id` is the WARC-Record-ID its response (or revisit) record will carry, `date` their WARC-Date.  A
frontier acknowledges a URL through that record only, not through any record of the same URL (an earlier refusal
of a retried fetch, in an earlier file, must not end it before the answer that finished it is durable)."""

warc_flush_requested = object()
"""Sent (no arguments) by the frontier when this worker has nothing left to fetch but holds URLs whose records
are not durable yet: the WARC writer then closes its open file if it holds any fetch (after every fetch
already captured), so that file becomes durable and `warc_file_durable` acknowledges it, without waiting for
its size or age.  Safe to send at any time and repeatedly: with nothing new in the file it does nothing."""


url_not_fetched = object()
"""Sent with `url=`, `reason=` and `detail=` on the reactor thread when the crawl is done with a URL for now without an
answer to record: `robots_denied` or `tdmrep_reserved` (the frontier refused it), or the kind of a network failure
after retries (spider/errors.py).  The WARC writer records it (crawl.warc.not_fetched), so the archive says what
became of every URL, not only of those fetched."""


@dataclass(frozen=True)
class DurableWarc:
    name: str                    # the file's name, e.g. weblm-20250101120000-00003-4242.warc.gz
    location: str                # where it now lives: a local path or a URI (s3://bucket/warc/<name>)
    bytes: int
    urls: tuple[str, ...]        # WARC-Target-URI of every fetch in it (response and revisit records), in file order
    record_ids: tuple[str, ...]  # those records' WARC-Record-IDs, aligned with `urls`
    recovered: bool = False      # written by an earlier crawl process and sent by this one (see warc_upload.py)
