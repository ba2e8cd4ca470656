"""WARC files to object storage: written in a local buffer, uploaded when closed, acknowledged when durable.

When paths.warc_dir is a URI the writer works in paths.warc_buffer exactly as it would in a local
warc_dir, and each file it closes goes to `<warc_dir>/<name>` through storage's Uploader (retry with
backoff and jitter, size checked where it lands).  The local file is deleted, and `on_durable` called,
only once the store holds it; a file the store keeps refusing stays in the buffer for the next start.

One crawl process owns a buffer at a time (an flock on `<buffer>/.lock`, dropped by the kernel when the
process dies): what is in the buffer when a crawl takes the lock was left by a dead one, so `recover()`
may salvage its `.open` files (spider/warc_salvage.py) and send its closed ones without racing a
live writer.  Two crawls on one machine need two buffers (`-o paths.warc_buffer=...`).
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Callable

import storage
from spider.signals import DurableWarc
from spider.warc import OPEN_SUFFIX, ClosedWarc
from spider.warc_salvage import DAMAGED_SUFFIX, read_fetches, salvage
from storage.config import UploadSettings
from storage.upload import Uploader, recover

logger = logging.getLogger(__name__)

WARC_SUFFIX = ".warc.gz"
LOCK_NAME = ".lock"


class BufferInUse(RuntimeError):
    """Another live crawl process writes into this WARC buffer."""


class WarcUploads:
    def __init__(self, buffer: str | os.PathLike, warc_dir: str, on_durable: Callable[[DurableWarc], None],
                 settings: UploadSettings | None = None):
        self.buffer = Path(buffer)
        self.warc_dir = warc_dir
        self.on_durable = on_durable
        try:  # a missing client (gcsfs for gs://) must stop the crawl now, not fail every upload later
            storage.filesystem(warc_dir)
        except ImportError as exc:
            raise ValueError(f"WARC files cannot go to {warc_dir}: {exc}; install the store's client "
                             f"(gs://: pip install 'weblm[gcs]')") from exc
        self.buffer.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.buffer)
        self.uploader = Uploader(settings, on_durable=self._uploaded, name="warc-upload")
        self._submitted: dict[str, ClosedWarc] = {}  # local path -> what it holds, until it is durable
        self._guard = threading.Lock()
        self.recovered = self.salvaged = self.damaged = 0
        self.finished = False

    def recover(self) -> int:
        """Salvage the `.open` files and send the closed ones a dead crawl left here; returns files queued.

        Call before this crawl closes its first file: everything closed in the buffer is then a dead one's.
        """
        for path in sorted(self.buffer.glob("*" + WARC_SUFFIX + OPEN_SUFFIX)):
            try:
                result = salvage(path)
            except OSError as exc:  # it stays as it is, counted as left in the buffer; the next start tries again
                logger.error("could not salvage %s (%s: %s); it stays in the buffer", path, type(exc).__name__, exc)
                continue
            self.salvaged += result.salvaged is not None
            self.damaged += result.damaged is not None
        self.recovered = recover(self.uploader, self.buffer, self.warc_dir, (WARC_SUFFIX,))
        return self.recovered

    def submit(self, closed: ClosedWarc) -> None:
        with self._guard:
            self._submitted[str(closed.path)] = closed  # before submit: the upload may finish at once
        self.uploader.submit(closed.path, storage.join(self.warc_dir, closed.path.name))

    def finish(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for every upload, then stop; True when nothing is left in the buffer."""
        try:
            self.uploader.close(timeout_s=timeout_s)
        finally:
            self.finished = True
            os.close(self._lock_fd)  # the next crawl with this buffer may take over what is left
        return not self.left_in_buffer()

    def left_in_buffer(self) -> list[Path]:
        """WARC files here that are not (yet) in warc_dir: closed, open, or kept as damaged."""
        return sorted(p for p in self.buffer.iterdir() if p.is_file()
                      and p.name.endswith((WARC_SUFFIX, WARC_SUFFIX + OPEN_SUFFIX, DAMAGED_SUFFIX)))

    def counters(self) -> dict[str, int | str | list[str]]:
        """The `warc_upload` crawl counters (SEAMS §2); buffer contents only once finished."""
        counts = dict(self.uploader.counts)
        out: dict[str, int | str | list[str]] = {
            "buffer": str(self.buffer),
            "files_uploaded": counts.get("files_uploaded", 0),
            "bytes_uploaded": counts.get("bytes_uploaded", 0),
            "attempts_failed": counts.get("attempts_failed", 0),
            "files_recovered": self.recovered,
            "files_salvaged": self.salvaged,
            "files_damaged": self.damaged,
            "files_pending": self.uploader.pending(),
        }
        if self.finished:
            left = self.left_in_buffer()
            out["files_in_buffer"] = len(left)
            out["bytes_in_buffer"] = sum(p.stat().st_size for p in left)
            out["files_left"] = [p.name for p in left]
        return out

    def _uploaded(self, local: str, dest: str) -> None:
        """The Uploader's callback, on its thread: `dest` holds the file, the local copy still exists."""
        with self._guard:
            closed = self._submitted.pop(local, None)
        try:
            if closed is None:  # a file of an earlier crawl: what it holds is read from it
                urls, record_ids = read_fetches(Path(local))
                size = os.path.getsize(local)
            else:
                urls, record_ids, size = closed.urls, closed.record_ids, closed.bytes
            self.on_durable(DurableWarc(os.path.basename(dest), dest, size, urls, record_ids,
                                        recovered=closed is None))
        except Exception:  # noqa: BLE001  (the file is durable: a failed notice must not keep it in the buffer)
            logger.exception("%s is durable at %s but its durable notice failed; its URLs stay unacknowledged "
                             "(the frontier fetches them again)", local, dest)


def _lock(buffer: Path) -> int:
    fd = os.open(buffer / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise BufferInUse(f"WARC buffer {buffer} is in use by another crawl (pid {owner}); give each crawl "
                          f"process its own buffer: -o paths.warc_buffer=<folder>") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
