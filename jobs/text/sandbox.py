"""Main-text extraction in a killable child process, with a per-document timeout.

trafilatura can run forever on some trees (trafilatura #704; its own timeout is CLI-only) and lxml
can crash or exhaust memory (#657).  In-process, one such document stalls or kills the Spark task;
here it costs one child process: the child is killed and restarted, the document is skipped with a
reason (`extract_timeout`, `extractor_crashed`) and the run goes on.  datatrove's pattern
(`extractors/base.py`): one persistent child per worker, documents sent over a pipe.
Not concurrent.futures (a ProcessPoolExecutor cannot kill one stuck task) nor pebble (a package more on each executor).

The child is started with the "spawn" context: forking a pyspark worker would copy its socket to
the JVM and any lock a thread holds at fork time.  Start-up (a fresh interpreter importing
trafilatura) happens once per sandbox and again only after a kill.  Like every spawn child, it
re-imports the parent's main module: a script that uses the sandbox needs the `__main__` guard
(pyspark's worker and our jobs have it).

    with ExtractionSandbox(cfg) as sandbox:
        result = sandbox.extract(html, status, content_type, charset, url)  # Extracted | reason

`page_extractor(cfg)` is the one entry point of every caller (the Spark job, `jobs.text.extract_files`):
the sandbox or, with `extract.sandbox=false`, the extractor in this process.
"""
from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from jobs.config import ExtractSettings

log = logging.getLogger("weblm.jobs.extract")

DEFAULT_EXTRACTOR = "jobs.text.main_text:extract_document"
_CLOSE_GRACE_S = 5.0  # how long a closing child may take to leave its loop before it is killed
_ORPHAN_CHECK_S = 1.0  # how often the child checks that its parent is still alive (one cheap syscall)


def load_extractor(path: str):
    """`"package.module:function"` -> the function."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"extractor {path!r} is not an import path of the form 'package.module:function'")
    return getattr(importlib.import_module(module), name)


def _exit_when_orphaned(parent_pid: int) -> None:
    # a parent killed hard (Spark cancelling the task) cannot kill us: leave rather than keep
    # spinning on a runaway page with no one waiting for it
    while os.getppid() == parent_pid:
        time.sleep(_ORPHAN_CHECK_S)
    os._exit(1)


def _serve(conn, extractor_path: str, cfg: ExtractSettings) -> None:
    """The child's loop: one request (html, status, content_type, charset, url) -> one result."""
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    extract = load_extractor(extractor_path)
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the parent went away: nothing left to serve
            return
        if request is None:
            return
        conn.send(extract(*request, cfg))


class ExtractionSandbox:
    """One persistent child process that runs `extractor(html, status, content_type, charset, url, cfg)`."""

    def __init__(self, cfg: ExtractSettings, extractor: str = DEFAULT_EXTRACTOR,
                 timeout_s: float | None = None):
        self.cfg = cfg
        self.extractor = extractor
        self.timeout_s = cfg.timeout_s if timeout_s is None else timeout_s
        if not self.timeout_s > 0:
            raise ValueError(f"extract.timeout_s is {self.timeout_s}: it must be a positive number of seconds "
                             f"(30 is a good default); to run without the sandbox set extract.sandbox=false")
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None
        self.starts = 0  # child processes started: 1 + restarts after timeouts and crashes

    # -- lifecycle ---------------------------------------------------------------------------------
    def _start(self) -> None:
        began = time.monotonic()
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(target=_serve, args=(child, self.extractor, self.cfg),
                                        name="weblm-extraction-sandbox", daemon=True)
        process.start()
        child.close()  # only the child holds its end: its death then shows as EOF here
        self._process, self._conn = process, parent
        try:
            ready = parent.poll(self.cfg.start_timeout_s) and parent.recv() == "ready"
        except EOFError:
            ready = False
        if not ready:
            self._kill()
            raise RuntimeError(
                f"extraction sandbox child did not start within {self.cfg.start_timeout_s:.0f} s (extractor "
                f"{self.extractor!r}, exit code {process.exitcode}); its stderr above says why. Check that "
                f"this Python can import the extractor and that a script using the sandbox keeps its work "
                f"under `if __name__ == '__main__':` (spawn re-imports it), or raise extract.start_timeout_s or set extract.sandbox=false")
        self.starts += 1
        log.debug("extraction sandbox child %d up in %.2f s", process.pid, time.monotonic() - began)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None

    def close(self) -> None:
        """Ask the child to leave, kill it if it does not; safe to call twice."""
        if self._process is None:
            return
        try:
            self._conn.send(None)
            self._process.join(_CLOSE_GRACE_S)
        except (BrokenPipeError, OSError):
            pass  # already dead: _kill reaps it
        self._kill()

    def __enter__(self) -> ExtractionSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the live child so far: the extraction's cost on one core,
        whatever else the machine runs; 0 before the first document."""
        if self._process is None:
            return 0.0
        import psutil

        times = psutil.Process(self._process.pid).cpu_times()
        return times.user + times.system

    # -- work --------------------------------------------------------------------------------------
    def __call__(self, html, status, content_type, charset, url):
        return self.extract(html, status, content_type, charset, url)

    def extract(self, html, status, content_type, charset, url):
        """The extractor's result for one document, or `extract_timeout` / `extractor_crashed`."""
        if self._process is None:
            self._start()
        try:
            self._conn.send((html, status, content_type, charset, url))
            # poll returns early when the child dies too (its end of the pipe closes)
            if not self._conn.poll(self.timeout_s):
                log.warning("extraction of %s took over %.0f s (extract.timeout_s): child killed and "
                            "restarted, document skipped as extract_timeout", url, self.timeout_s)
                self._kill()
                return "extract_timeout"
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._process.join(_CLOSE_GRACE_S)
            log.warning("extraction child died on %s (exit code %s: a crash in lxml or the memory limit): "
                        "restarted, document skipped as extractor_crashed", url, self._process.exitcode)
            self._kill()
            return "extractor_crashed"


@contextmanager
def page_extractor(cfg: ExtractSettings, extractor: str = DEFAULT_EXTRACTOR) -> Iterator[Callable]:
    """`extract(html, status, content_type, charset, url) -> Extracted | reason`, as `extract.sandbox` says:
    in a killable child process (one per `with`: the `ExtractionSandbox` itself), or in this process."""
    if not cfg.sandbox:
        extract_in_process = load_extractor(extractor)
        yield lambda *request: extract_in_process(*request, cfg)
        return
    with ExtractionSandbox(cfg, extractor) as sandbox:
        yield sandbox
