"""Scripts and stylesheets a render fetched, kept in memory and served to the crawl process's later renders.

A site's pages share their bundles (`/_next/static/app.js`, a theme's CSS): without a cache every render of the site
fetches them again, each through its host's delay (1 s in conf), which is load on the host and time in the render.
Chromium's own HTTP cache cannot do it: Playwright turns it off while requests are routed, and every render has a
context of its own.  Google's renderer (WRS) does the same for every script and stylesheet, for up to 30 days whatever
their HTTP caching headers say, to spare the host's crawl budget (Google Search Central blog, December 2024).
Here a host's `no-store` is obeyed, and `render.cache_max_age_s` is an hour: a site's crawl mostly fits in it.

Bounded by bytes (least recently used dropped) and by age (a site may deploy a new bundle under the same URL).  An
OrderedDict, not cachetools' LRUCache (no dependency of the spider extra).  Kept per crawl process, as the host memory
(spider/render/memory.py) is: a site's files are fetched once by each worker that renders its pages.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class CachedAnswer:
    status: int
    headers: dict[str, str]   # as the host sent them, less those of the transfer (the body is stored decoded)
    body: bytes
    stored_at: float


class SubresourceCache:
    """URL -> the host's answer, `max_bytes` of bodies in all; an answer over a quarter of that is not kept (one
    bundle would push out a site's every other file)."""

    def __init__(self, max_bytes: int, max_age_s: float, clock=time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._clock = clock
        self._answers: OrderedDict[str, CachedAnswer] = OrderedDict()
        self.bytes = 0

    def get(self, url: str) -> CachedAnswer | None:
        answer = self._answers.get(url)
        if answer is None:
            return None
        if self._clock() - answer.stored_at > self.max_age_s:
            self._drop(url)
            return None
        self._answers.move_to_end(url)
        return answer

    def put(self, url: str, status: int, headers: dict[str, str], body: bytes) -> bool:
        """Keep the answer; False when it is too big to keep."""
        if len(body) > self.max_bytes // 4:
            return False
        if url in self._answers:
            self._drop(url)
        self._answers[url] = CachedAnswer(status, dict(headers), body, self._clock())
        self.bytes += len(body)
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._answers)))
        return True

    def _drop(self, url: str) -> None:
        self.bytes -= len(self._answers.pop(url).body)

    def __len__(self) -> int:
        return len(self._answers)
