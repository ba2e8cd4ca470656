"""A frontier stand-in for the tests: Scrapy's scheduler plus a handler for `warc_file_durable`.

A frontier plugs in exactly so (`-o scheduler=...`, SEAMS §2).  At each signal it looks, there and then,
at where the file is said to live, and appends what it saw as one JSON line to $WEBLM_DURABLE_PROBE.
"""
from __future__ import annotations

import json
import os

from scrapy.core.scheduler import Scheduler

import storage
from spider.signals import DurableWarc, warc_file_durable


class DurableProbeScheduler(Scheduler):
    @classmethod
    def from_crawler(cls, crawler):
        scheduler = super().from_crawler(crawler)
        crawler.signals.connect(_record, signal=warc_file_durable)
        return scheduler


def _record(warc: DurableWarc) -> None:
    there = storage.exists(warc.location)
    line = {"name": warc.name, "location": warc.location, "bytes": warc.bytes, "urls": list(warc.urls),
            "record_ids": list(warc.record_ids), "recovered": warc.recovered,
            "exists_at_signal": there, "size_at_signal": storage.size(warc.location) if there else None,
            "open_at_signal": os.path.exists(warc.location + ".open") if not storage.is_uri(warc.location) else None}
    with open(os.environ["WEBLM_DURABLE_PROBE"], "a") as out:
        out.write(json.dumps(line) + "\n")
