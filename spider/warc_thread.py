"""The crawl's one WARC writer thread: gzip, write(2) and fsync never run on the reactor thread.

The reactor hands each fetch over through a bounded `queue.Queue` (crawl.warc.queue_records) and goes on.
When the queue is full the fetch is not dropped and the reactor is not blocked: `submit()` returns a
Deferred that fires once the fetch is in the queue, and the middleware awaits it, so that response holds
its place in Scrapy's CONCURRENT_REQUESTS until the disk catches up (back-pressure, in arrival order).
The thread takes what is queued (up to BATCH fetches) at once and asks the payload-digest index about all of it in
one call: one round trip to a shared frontier per batch, not per record (bench/frontier_ops.py measures both).

Everything the thread reports (`on_written`, `on_error`, and the writer's own `on_closed`) is called on
the writer thread; the caller marshals to its reactor (reactor.callFromThread) before it touches Scrapy.
The one exception is the wake-up of waiting fetches, which goes through `call_soon` (the reactor's
callFromThread): Deferreds belong to the reactor thread.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from typing import Callable

from twisted.internet.defer import Deferred

from spider.warc import Capture, DigestIndex, Fetch, NotFetched, RotatingWarcWriter, Written

logger = logging.getLogger(__name__)

_TICK = "rotate the file if it is old"   # commands on the queue, beside the fetches
_FLUSH = "close the file if it holds a fetch"
_STOP = "close the file and end"
BATCH = 64  # fetches taken from the queue at once when it holds that many: their digests go to the index in one call


class WriterStopped(RuntimeError):
    """A fetch came after the writer thread was told to stop (the crawl is closing)."""


class WarcWriterThread:
    def __init__(self, writer: RotatingWarcWriter, max_queued: int, *,
                 digests: Callable[[], DigestIndex | None] = lambda: None,
                 on_written: Callable[[Fetch, Written], None] = lambda fetch, written: None,
                 on_error: Callable[[Fetch | NotFetched | None, Exception], None] = lambda fetch, exc: None,
                 call_soon: Callable[..., None] = lambda f, *args: f(*args)):
        self.writer = writer
        self.digests = digests        # asked at each write: the frontier may set its index after we start
        self.on_written = on_written
        self.on_error = on_error
        self.call_soon = call_soon
        self.full_waits = 0           # fetches that found the queue full
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued)
        self._waiting: deque[tuple[object, Deferred]] = deque()  # in arrival order, behind the full queue
        self._lock = threading.Lock()  # guards _waiting: the writer thread wakes it, the reactor fills it
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="warc-writer", daemon=True)
        self._thread.start()

    # --- the reactor's side ----------------------------------------------------------------------------
    def submit(self, fetch: Fetch | NotFetched) -> Deferred | None:
        """Queue a fetch (or a URL not fetched): None when it is in, else a Deferred that fires once it is (the queue
        was full)."""
        if self._stopping:
            raise WriterStopped(f"the WARC writer is closed; {fetch.url} is not recorded (so never acknowledged: "
                                "the frontier fetches it again)")
        return self._put(fetch)

    def flush(self) -> None:
        """Close the current file once every fetch queued before this call is in it (if it holds any)."""
        if not self._stopping:
            self._put(_FLUSH)

    def tick(self) -> None:
        """Rotate the file if it is too old; skipped when the queue is full (the writes check age themselves)."""
        if self._stopping:
            return
        try:
            self._queue.put_nowait(_TICK)
        except queue.Full:
            pass

    def stop(self) -> None:
        """Queue the end behind every fetch (waiting ones included); `join()` then waits for the file's close."""
        if not self._stopping:
            self._stopping = True
            self._put(_STOP)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to drain its queue and close its file (call off the reactor); True when done."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def queued(self) -> int:
        return self._queue.qsize() + len(self._waiting)

    def _put(self, item) -> Deferred | None:
        with self._lock:
            if not self._waiting:
                try:
                    self._queue.put_nowait(item)
                    return None
                except queue.Full:
                    pass
            done: Deferred = Deferred()
            self._waiting.append((item, done))
            self.full_waits += 1
        self._move_waiting()  # the writer may have made room since put_nowait failed
        return done

    def _move_waiting(self) -> None:
        """Move waiting items into the queue while it has room, in order, firing their Deferreds."""
        moved = []
        with self._lock:
            while self._waiting:
                try:
                    self._queue.put_nowait(self._waiting[0][0])
                except queue.Full:
                    break
                moved.append(self._waiting.popleft()[1])
        for done in moved:
            done.callback(None)

    # --- the writer thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        stopped = False
        while not stopped:
            items = [self._queue.get()]  # and whatever else is queued, up to BATCH: one digest lookup for them all
            while len(items) < BATCH and items[-1] is not _STOP:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if self._waiting:  # slots are free now; a wake-up missed here is made good by _put itself
                self.call_soon(self._move_waiting)
            if items[-1] is _STOP:
                items.pop()
                stopped = True
            self._do_all(items)
        try:
            self.writer.close()
        except Exception as exc:  # noqa: BLE001  (reported to the crawl, which stops with it)
            self.on_error(None, exc)

    def _do_all(self, items: list) -> None:
        fetches = [item for item in items if isinstance(item, Fetch)]
        try:
            captures = iter(self.writer.captures(fetches, self.digests()) if fetches else ())
        except Exception as exc:  # noqa: BLE001  (each write looks its fetch up again and reports its own error)
            logger.warning("looking up %d fetches' payload digests failed (%s: %s); each is looked up alone",
                           len(fetches), type(exc).__name__, exc)
            captures = iter([None] * len(fetches))
        for item in items:
            self._do(item, next(captures) if isinstance(item, Fetch) else None)

    def _do(self, item, capture: Capture | None = None) -> None:
        fetch = item if isinstance(item, (Fetch, NotFetched)) else None
        try:
            if isinstance(item, Fetch):
                written = self.writer.write(item, self.digests(), capture)
                self.on_written(item, written)
            elif isinstance(item, NotFetched):
                self.writer.write_not_fetched(item)
            elif item is _FLUSH:
                self.writer.flush()
            elif item is _TICK:
                self.writer.close_if_old()
        except Exception as exc:  # noqa: BLE001  (the thread must outlive any one record: the crawl decides)
            self.on_error(fetch, exc)
