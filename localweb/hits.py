"""A thread-safe record of what the proxy served: lets tests assert politeness and robots compliance."""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    at: float        # time.monotonic() when the request arrived
    method: str
    host: str
    target: str      # path plus "?query" as requested
    status: int


class Hits:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter = Counter()
        self._log: list[Hit] = []

    def record(self, method: str, host: str, target: str, status: int) -> None:
        with self._lock:
            self._counts[(host, target)] += 1
            self._log.append(Hit(time.monotonic(), method, host, target, status))

    def __getitem__(self, key: tuple[str, str]) -> int:
        """hits[(host, "/path?query")] -> requests served for it (0 if none)."""
        with self._lock:
            return self._counts[key]

    def count(self, host: str | None = None, prefix: str = "") -> int:
        """Requests to `host` (all hosts if None) whose target starts with `prefix`."""
        with self._lock:
            return sum(n for (h, t), n in self._counts.items()
                       if (host is None or h == host) and t.startswith(prefix))

    def log(self, host: str | None = None) -> list[Hit]:
        """Every request in arrival order, optionally for one host (for delay assertions)."""
        with self._lock:
            return [hit for hit in self._log if host is None or hit.host == host]

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
            self._log.clear()
