"""Answers no well-behaved server gives: a body shorter than its Content-Length, gzip that does not
inflate, a gzip bomb, binary bytes linked like a page, a 20 MB page, and a response that never comes.

The big bodies are built on first use (a bomb takes about a second to deflate), once, under a lock.
"""
from __future__ import annotations

import random
import threading
import zlib
from dataclasses import dataclass
from typing import Callable

from localweb.responses import Response

NEVER = 0   # the status of a response that never comes: the proxy holds the connection, then closes it


@dataclass(frozen=True)
class RawResponse(Response):
    declared_length: int | None = None             # Content-Length to send when it is not the body's length
    build: Callable[[], bytes] | None = None       # makes a big body on first use instead of at start


class Lazy:
    """A body built once, on the first request that needs it."""

    def __init__(self, make: Callable[[], bytes]):
        self._make, self._value, self._lock = make, None, threading.Lock()

    def __call__(self) -> bytes:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value


def never_answers(seconds: float) -> Response:
    return Response(NEVER, delay_seconds=seconds)


def truncated(html: bytes) -> RawResponse:
    """Declares twice the bytes it sends, then closes: the client sees the connection drop mid-body."""
    return RawResponse(200, (("Content-Type", "text/html; charset=utf-8"),), html, declared_length=2 * len(html))


def broken_gzip(html: bytes) -> RawResponse:
    good = zlib.compress(html, 6, wbits=31)       # wbits 31: a gzip member
    body = good[:10] + bytes(b ^ 0x5A for b in good[10:40]) + good[40:]   # header intact, deflate data garbled
    return RawResponse(200, (("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip")), body)


def gzip_bomb(inflated_bytes: int) -> RawResponse:
    def make() -> bytes:
        deflate, zeros = zlib.compressobj(9, zlib.DEFLATED, 31), bytes(1 << 20)
        parts = [deflate.compress(zeros[:min(len(zeros), inflated_bytes - done)])
                 for done in range(0, inflated_bytes, len(zeros))]
        return b"".join(parts) + deflate.flush()
    return RawResponse(200, (("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip")),
                       build=Lazy(make))


def binary(size: int, seed: str) -> RawResponse:
    return RawResponse(200, (("Content-Type", "application/octet-stream"),), random.Random(seed).randbytes(size))


def enormous(size: int, paragraph: str) -> RawResponse:
    def make() -> bytes:
        head, tail = b"<!DOCTYPE html>\n<html><head><title>Everything</title></head><body>\n", b"</body></html>\n"
        line = f"<p>{paragraph}</p>\n".encode()
        count = max(1, (size - len(head) - len(tail)) // len(line))
        return head + line * count + tail
    return RawResponse(200, (("Content-Type", "text/html; charset=utf-8"),), build=Lazy(make))
