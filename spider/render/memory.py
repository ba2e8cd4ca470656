"""Per-host memory of what rendering gave: render a host's pages first once it needed it, stop once it never helps.

Kept per crawl process, bounded (least recently used hosts forgotten): a worker learns a host within a few
pages, and the frontier hands one host to one worker at a time, so sharing it over Redis buys little.
An OrderedDict, not cachetools' LRUCache (no dependency of the spider extra): functools.lru_cache memoises calls only.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class HostRecord:
    needed: int = 0      # renders that added at least min_gain_chars of text
    useless: int = 0     # renders that added less


class HostMemory:
    def __init__(self, render_after: int = 2, stop_after: int = 2, max_hosts: int = 100_000):
        self.render_after = render_after
        self.stop_after = stop_after
        self.max_hosts = max_hosts
        self._hosts: OrderedDict[str, HostRecord] = OrderedDict()

    def verdict(self, host: str) -> str:
        """"render": the host needed rendering `render_after` times; "skip": its renders added nothing
        `stop_after` times and never helped; "": no opinion yet, the page's own signals decide."""
        record = self._hosts.get(host)
        if record is None:
            return ""
        self._hosts.move_to_end(host)
        if record.needed >= self.render_after and record.needed > record.useless:
            return "render"
        if record.needed == 0 and record.useless >= self.stop_after:
            return "skip"
        return ""

    def learn(self, host: str, gained_chars: int, min_gain_chars: int) -> None:
        record = self._hosts.setdefault(host, HostRecord())
        self._hosts.move_to_end(host)
        if gained_chars >= min_gain_chars:
            record.needed += 1
        else:
            record.useless += 1
        while len(self._hosts) > self.max_hosts:
            self._hosts.popitem(last=False)

    def record(self, host: str) -> HostRecord | None:
        return self._hosts.get(host)
