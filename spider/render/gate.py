"""Politeness for a render's own requests: a render is a fetch, so its sub-requests obey the host's rules.

Each sub-request (script, XHR, stylesheet) of a rendered page passes here first: robots.txt for its host
(RFC 9309, the frontier's record rules: spider/frontier/robots.py) and the host's delay since the last request
to it, the page's own fetch included.  The robots.txt answers come through the same proxy as the crawl and are
cached per process for `frontier.robots_ttl_s`.  Hand-written because Playwright has no politeness of its own.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from spider.frontier.robots import Robots, from_answer, from_error, parse

RobotsFetch = Callable[[str], Awaitable[tuple[int, bytes]]]   # robots.txt URL -> (status, body); raises on network error


class SubrequestGate:
    def __init__(self, delay_s: float, user_agent: str, robots_ttl_s: float = 86400.0,
                 robots_error_ttl_s: float = 600.0, robots_max_bytes: int = 512_000, obey_robots: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self.delay_s = delay_s
        self.user_agent = user_agent
        self.obey_robots = obey_robots
        self.robots_ttl_s, self.robots_error_ttl_s, self.robots_max_bytes = robots_ttl_s, robots_error_ttl_s, robots_max_bytes
        self.counters: Counter[str] = Counter()
        self._clock = clock
        self._last: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._robots: dict[str, Robots] = {}
        self._robots_pending: dict[str, asyncio.Future] = {}

    def fetched(self, host: str) -> None:
        """The crawl itself just fetched from `host` (the page being rendered): the next sub-request waits."""
        self._last[host] = self._clock()

    async def allowed(self, url: str, fetch_robots: RobotsFetch) -> bool:
        if not self.obey_robots:
            return True
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        robots = self._robots.get(origin)
        if robots is None or robots.record.expires <= time.time():
            robots = await self._load_robots(origin, fetch_robots)
        return robots.allowed(url, self.user_agent)

    async def _load_robots(self, origin: str, fetch_robots: RobotsFetch) -> Robots:
        """One robots.txt fetch per host, however many sub-requests wait on it.  It runs as its own task: a waiter
        cancelled (its render ended) does not cancel it for the others."""
        pending = self._robots_pending.get(origin)
        if pending is None:
            pending = self._robots_pending[origin] = asyncio.ensure_future(self._fetch_robots(origin, fetch_robots))
        return await asyncio.shield(pending)

    async def _fetch_robots(self, origin: str, fetch_robots: RobotsFetch) -> Robots:
        now = time.time()
        try:
            await self.wait_turn(urlsplit(origin).hostname or "")
            status, body = await fetch_robots(origin + "/robots.txt")
            record = from_answer(status, body, now, self.robots_ttl_s, self.robots_error_ttl_s, self.robots_max_bytes)
        except Exception as exc:  # noqa: BLE001  (unreachable robots.txt: RFC 9309 §2.3.1.4, disallow for a while)
            record = from_error(type(exc).__name__, now, self.robots_ttl_s, self.robots_error_ttl_s)
        finally:
            del self._robots_pending[origin]
        self.counters["robots_fetched"] += 1
        robots = self._robots[origin] = parse(record)
        return robots

    async def wait_turn(self, host: str) -> float:
        """Wait until `host` may be asked again (one request at a time, `delay_s` apart); returns seconds waited."""
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            wait = self._last.get(host, float("-inf")) + self.delay_s - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last[host] = self._clock()
        return max(wait, 0.0)

    @contextlib.asynccontextmanager
    async def turn(self, host: str):
        """Hold `host` for one request: `delay_s` after the end of the previous one, one at a time."""
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            wait = self._last.get(host, float("-inf")) + self.delay_s - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                yield
            finally:
                self._last[host] = self._clock()

    def host_of(self, url: str) -> str:
        return urlsplit(url).hostname or ""
