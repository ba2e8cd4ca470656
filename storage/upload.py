"""Background uploads of closed local files to their durable home, with retry, backoff and a local buffer.

A producer (the WARC writer, the checkpoint writer) finishes a file in a local buffer folder and calls
`submit(local, dest)`.  A worker thread copies it with `storage.put_file` (which checks the size that
arrived), retrying with exponential backoff and jitter; only when the copy is durable does it delete the
local file and call `on_durable(local, dest)`.  A file that still fails after every retry stays in the
buffer, counted and logged, and `recover()` on the next start sends it.  Nothing is deleted or
acknowledged before its destination holds it.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import storage
from storage.config import UploadSettings, load_storage_config

log = logging.getLogger("weblm.storage.upload")


class Uploader:
    def __init__(self, settings: UploadSettings | None = None,
                 on_durable: Callable[[str, str], None] | None = None, name: str = "upload") -> None:
        self.settings = settings or load_storage_config().upload
        self.on_durable = on_durable
        self.name = name
        self.counts: Counter = Counter()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.settings.workers), thread_name_prefix=name)
        self._pending: dict[int, Future] = {}  # by future, so a resubmitted path is never dropped by its old upload
        self._stop = threading.Event()

    def submit(self, local: str | os.PathLike, dest: str, keep_local: bool = False) -> Future:
        """Queue `local` for copying to `dest`; returns a future whose result is True once durable."""
        local = str(local)
        with self._lock:
            self.counts["submitted"] += 1
            future = self._pool.submit(self._upload, local, dest, keep_local)
            self._pending[id(future)] = future
        future.add_done_callback(lambda f: self._forget(id(f)))
        return future

    def _forget(self, key: int) -> None:
        with self._lock:
            self._pending.pop(key, None)

    def _upload(self, local: str, dest: str, keep_local: bool) -> bool:
        # hand-written, not tenacity: no dependency of storage, for this one loop (storage.retrying says the same)
        s = self.settings
        delay = s.backoff_initial_s
        for attempt in range(1, s.retries + 1):
            try:
                storage.put_file(local, dest)
            except Exception as exc:  # noqa: BLE001  (any client error is a retry, never a crash of the caller)
                with self._lock:
                    self.counts["attempts_failed"] += 1
                if attempt == s.retries or self._stop.is_set():
                    with self._lock:
                        self.counts["files_left_in_buffer"] += 1
                    log.error("%s: %s -> %s failed %d times (%s: %s); the file stays in %s and is sent on the "
                              "next start", self.name, local, dest, attempt, type(exc).__name__, exc,
                              os.path.dirname(local))
                    return False
                wait = min(delay, s.backoff_max_s) * (1 + 0.25 * random.random())
                log.warning("%s: %s -> %s attempt %d failed (%s: %s); retrying in %.1f s", self.name,
                            os.path.basename(local), dest, attempt, type(exc).__name__, exc, wait)
                self._stop.wait(wait)
                delay *= 2
                continue
            with self._lock:
                self.counts["files_uploaded"] += 1
                self.counts["bytes_uploaded"] += os.path.getsize(local)
            if self.on_durable:
                self.on_durable(local, dest)
            if not keep_local:
                Path(local).unlink(missing_ok=True)
            return True
        return False

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait for every queued upload; True when all of them are durable."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            futures = list(self._pending.values())
        ok = True
        for future in futures:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ok = bool(future.result(timeout=remaining)) and ok
            except Exception:  # noqa: BLE001  (a timeout: the file stays in the buffer)
                ok = False
        return ok and self.pending() == 0

    def close(self, timeout_s: float | None = None) -> bool:
        """Drain, then stop the workers; files not yet durable stay in the buffer."""
        ok = self.drain(timeout_s)
        if not ok:
            self._stop.set()  # cut the backoff waits short: what is left is retried on the next start
            with self._lock:
                queued = list(self._pending.values())
            never_started = [f for f in queued if f.cancel()]  # outside the lock: cancel() runs _forget
            with self._lock:
                self.counts["files_left_in_buffer"] += len(never_started)
        self._pool.shutdown(wait=True, cancel_futures=True)
        return ok


def recover(uploader: Uploader, buffer_dir: str | os.PathLike, dest_dir: str,
            suffixes: tuple[str, ...]) -> int:
    """Queue every finished file a previous process left in `buffer_dir` (names ending in `suffixes`)."""
    folder = Path(buffer_dir)
    if not folder.is_dir():
        return 0
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(suffixes))
    for path in found:
        uploader.submit(path, storage.join(dest_dir, path.name))
    if found:
        log.info("%s: %d file(s) left in %s by an earlier run are being uploaded to %s",
                 uploader.name, len(found), folder, dest_dir)
    return len(found)
