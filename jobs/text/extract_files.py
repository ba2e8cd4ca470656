"""Main text of HTML files on disk, through the extract job's own code and configuration.

    python -m jobs.text.extract_files DIR OUT.jsonl [-o extract.min_chars=100] [--stats STATS.json] [--workers N]

Every `*.html` and `*.html.gz` file under DIR (the bytes as served, no HTTP headers; a sibling
`<id>.url` file holds the page's URL; without one, the page's own `<link rel=canonical>` or `og:url`, if any)
goes through `page_extractor`, as each bronze row does in `jobs.extract`: the same decoding, checks,
extractor, sandbox and `conf/jobs.yaml` settings.
OUT gets one line `{"id": ..., "text": ...}` per file, id = the file name without `.html`/`.html.gz`,
text "" when the page is dropped.  A file that cannot be read or a page that cannot be extracted is
counted and reported on stderr, never a failed run; a `.gz` file cut short is read as far as it inflates
(counted and reported too).  `--workers N` extracts N pages at once, each worker with its own sandbox
process (0: one per CPU core); OUT is the same for any N.  `bench/extraction_quality.py` scores the output.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
import zlib
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from jobs.config import ExtractSettings, load_jobs_config
from jobs.text.main_text import Extracted
from jobs.text.page_type import declared_url
from jobs.text.sandbox import DEFAULT_EXTRACTOR, page_extractor

log = logging.getLogger("weblm.jobs.extract_files")

SUFFIXES = (".html.gz", ".html")
_PROGRESS_S = 10.0  # seconds between progress lines on stderr
_AHEAD_PER_WORKER = 16  # with --workers: results held for writing in file order, per worker
_WARM_UP_PAGE = b"<html><head><title>warm-up</title></head><body><p>warm-up</p></body></html>"


@dataclass
class RunStats:
    files: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)      # reason -> files
    decoded_by: Counter = field(default_factory=Counter)   # bom | header | meta | utf-8 | detected | fallback
    replacement_chars: int = 0                             # U+FFFD put in by the counted fallback decode
    duplicate_ids: int = 0
    truncated_files: int = 0                               # .gz files cut short: the part that inflates is read
    seconds: float = 0.0                                   # reading and extracting, not the sandbox's start
    cpu_seconds: float = 0.0                               # the same on the CPU: this process and the sandbox child

    @property
    def docs_per_s(self) -> float:
        return self.files / self.seconds if self.seconds else 0.0

    @property
    def docs_per_cpu_s(self) -> float:
        """Documents per CPU-second: docs/s on one core, unlike docs_per_s not slowed by a busy machine."""
        return self.files / self.cpu_seconds if self.cpu_seconds else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "dropped": dict(self.dropped), "decoded_by": dict(self.decoded_by),
                "docs_per_s": round(self.docs_per_s, 2),
                "docs_per_cpu_s": round(self.docs_per_cpu_s, 2)}


def page_files(root: Path) -> list[Path]:
    """The page files under `root`, in a stable order; a link to nothing is one too (read, it is reported as an
    unreadable file, not left out without a word)."""
    return sorted(p for p in root.rglob("*") if p.name.endswith(SUFFIXES)
                  and (p.is_file() or (p.is_symlink() and not p.exists())))


def page_id(path: Path) -> str:
    return next(path.name[:-len(s)] for s in SUFFIXES if path.name.endswith(s))


def read_page(path: Path, max_bytes: int) -> tuple[bytes, bool]:
    """The page's bytes, at most `max_bytes + 1` of them (enough for the job's size check to say too_large
    without inflating a gzip bomb), and whether a gzip file ended before its end-of-stream marker: then the
    bytes are what its complete part inflates to.  A file that is not gzip, or cut before any of the page, raises
    (zlib.error, EOFError, OSError)."""
    if not path.name.endswith(".gz"):
        with open(path, "rb") as f:
            return f.read(max_bytes + 1), False
    # zlib, not gzip.open: GzipFile raises EOFError at a cut and drops what it had inflated of its last block
    out, limit = bytearray(), max_bytes + 1
    inflate, pending, started, members = zlib.decompressobj(wbits=31), b"", False, 0
    with open(path, "rb") as f:
        while len(out) < limit:
            pending = pending or f.read(1 << 16)
            if not pending:   # no more input: a stream left open was cut short
                if started and not out:
                    raise EOFError("the gzip stream ends before any of the page")
                return bytes(out), started
            if members and not started:   # after a member, gzip allows another one or zero padding
                pending = pending.lstrip(b"\0")
                if not pending:
                    continue
            out += inflate.decompress(pending, limit - len(out))
            started, pending = True, inflate.unconsumed_tail
            if inflate.eof:
                pending, started, members = inflate.unused_data, False, members + 1
                inflate = zlib.decompressobj(wbits=31)
    return bytes(out[:limit]), False


def read_url(path: Path) -> str | None:
    sibling = path.with_name(page_id(path) + ".url")
    try:
        return sibling.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def extract_page(path: Path, extract, cfg: ExtractSettings) -> tuple[Extracted | str, bool]:
    """One page file through `extract`: (its result, whether its gzip stream was cut short)."""
    try:
        html, cut = read_page(path, cfg.max_html_bytes)
    except (OSError, EOFError, zlib.error) as exc:
        log.warning("%s: unreadable (%s: %s): written with empty text", path, type(exc).__name__, exc)
        return "unreadable_file", False
    if cut:
        log.warning("%s: the gzip stream is cut short: extracted from the %d bytes it inflates to", path, len(html))
    return extract(html, 200, "text/html", None, read_url(path) or declared_url(html)), cut


class _Workers:
    """`workers` threads, each with its own extraction sandbox (a child process: the CPU work runs there, so the
    threads only wait on their pipes); results come back in file order, at most `ahead` of them held.
    By hand, not concurrent.futures: each thread keeps one sandbox open across pages and closes it at the end."""

    def __init__(self, files: list[Path], cfg: ExtractSettings, extractor: str, workers: int, ahead: int):
        self.files, self.cfg, self.extractor = files, cfg, extractor
        self.results: dict[int, tuple] = {}
        self.taken, self.error, self.stopped = 0, None, False
        self.changed = threading.Condition()
        self.window = threading.Semaphore(ahead)   # results not yet written, and pages being extracted
        self.warm = threading.Barrier(workers + 1)
        self.child_cpu = [0.0] * workers             # per worker: its child's CPU seconds after its warm-up
        self.threads = [threading.Thread(target=self._work, args=(w,), name=f"extract-files-{w}", daemon=True)
                        for w in range(workers)]

    def _work(self, w: int) -> None:
        try:
            with page_extractor(self.cfg, self.extractor) as extract:
                extract(_WARM_UP_PAGE, 200, "text/html", None, None)
                child_cpu = getattr(extract, "cpu_seconds", lambda: 0.0)
                warm_cpu = child_cpu()
                self.warm.wait()
                while True:
                    self.window.acquire()
                    with self.changed:
                        if self.stopped or self.taken == len(self.files):
                            return
                        i, self.taken = self.taken, self.taken + 1
                    result = extract_page(self.files[i], extract, self.cfg)
                    with self.changed:
                        self.results[i] = result
                        self.child_cpu[w] = max(0.0, child_cpu() - warm_cpu)  # a restarted child starts at 0
                        self.changed.notify_all()
        except BaseException as exc:  # noqa: BLE001  (re-raised in the writing thread)
            with self.changed:
                self.error = self.error or exc
                self.stopped = True
                self.changed.notify_all()
            self.warm.abort()

    def started(self) -> None:
        """Start the workers and wait until every sandbox has started and run its warm-up page."""
        for thread in self.threads:
            thread.start()
        try:
            self.warm.wait()
        except threading.BrokenBarrierError:
            raise self.error from None

    def in_order(self) -> Iterator[tuple[Extracted | str, bool]]:
        for i in range(len(self.files)):
            with self.changed:
                while i not in self.results and self.error is None:
                    self.changed.wait()
                if self.error is not None:
                    raise self.error
                result = self.results.pop(i)
            self.window.release()
            yield result

    def cpu_seconds(self) -> float:
        with self.changed:
            return sum(self.child_cpu)

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
        for _ in self.threads:
            self.window.release()   # a worker waiting for room sees `stopped`
        for thread in self.threads:
            thread.join()


@contextmanager
def _extracting(files: list[Path], cfg: ExtractSettings, extractor: str, workers: int):
    """(the pages' results in file order, the sandbox children's CPU seconds so far), once every sandbox is up."""
    if workers == 1:
        with page_extractor(cfg, extractor) as extract:
            extract(_WARM_UP_PAGE, 200, "text/html", None, None)  # start the sandbox and its imports untimed
            child_cpu = getattr(extract, "cpu_seconds", lambda: 0.0)  # in-process: all of it is process_time's
            warm_cpu = child_cpu()
            yield (extract_page(path, extract, cfg) for path in files), lambda: child_cpu() - warm_cpu
        return
    if not cfg.sandbox:
        raise ValueError(f"{workers} workers extract in one sandbox child each: set extract.sandbox=true, or use "
                         "one worker (in this process, Python runs one extraction at a time)")
    pool = _Workers(files, cfg, extractor, workers, ahead=_AHEAD_PER_WORKER * workers)
    try:
        pool.started()
        yield pool.in_order(), pool.cpu_seconds
    finally:
        pool.stop()


def extract_files(root: Path, out: Path, cfg: ExtractSettings, extractor: str = DEFAULT_EXTRACTOR,
                  workers: int = 1) -> RunStats:
    """Write one `{id, text}` line per page file under `root` to `out` (all or nothing), extracting with `workers`
    sandboxes at once (the lines are the same, in the same order, for any number)."""
    if workers < 1:
        raise ValueError(f"workers is {workers}: give 1 or more")
    files = page_files(root)
    stats, seen = RunStats(), set()
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _extracting(files, cfg, extractor, workers) as (results, child_cpu), \
                open(partial, "w", encoding="utf-8", errors="replace") as sink:
            cpu_started = time.process_time()
            started = last_report = time.perf_counter()
            for path, (result, cut) in zip(files, results):
                doc_id = page_id(path)
                stats.duplicate_ids += doc_id in seen
                seen.add(doc_id)
                stats.truncated_files += cut
                if isinstance(result, Extracted):
                    stats.kept += 1
                    stats.decoded_by[result.decode_source] += 1
                    stats.replacement_chars += result.replacements
                    text = result.text
                else:
                    stats.dropped[result] += 1
                    text = ""
                sink.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
                stats.files += 1
                now = time.perf_counter()
                if now - last_report >= _PROGRESS_S:
                    rate = stats.files / (now - started)
                    log.info("%d/%d files, %.1f docs/s, ETA %.0f s", stats.files, len(files), rate,
                             (len(files) - stats.files) / rate)
                    last_report = now
            stats.seconds = time.perf_counter() - started
            stats.cpu_seconds = time.process_time() - cpu_started + child_cpu()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    return stats


def report(stats: RunStats, out: Path) -> str:
    dropped = ", ".join(f"{reason} {n}" for reason, n in stats.dropped.most_common()) or "none"
    decoded = ", ".join(f"{source} {n}" for source, n in stats.decoded_by.most_common()) or "none"
    lines = [f"extract_files: {stats.files} files -> {out} in {stats.seconds:.1f} s ({stats.docs_per_s:.1f} docs/s, "
             f"{stats.docs_per_cpu_s:.1f} per CPU-second); kept {stats.kept}, dropped {stats.files - stats.kept}",
             f"  dropped by reason: {dropped}",
             f"  decoded by: {decoded}; replacement characters from undecodable bytes: {stats.replacement_chars}"]
    if stats.truncated_files:
        lines.append(f"  gzip files cut short, read as far as they inflate: {stats.truncated_files}")
    if stats.duplicate_ids:
        lines.append(f"  {stats.duplicate_ids} files share an id with an earlier file (same name in another folder)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.text.extract_files", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="folder searched recursively for *.html and *.html.gz")
    parser.add_argument("out", type=Path, help="JSON lines output: {id, text} per file")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a conf/jobs.yaml setting, e.g. extract.min_chars=100 (repeatable)")
    parser.add_argument("--stats", type=Path, help="also write the run's counts and docs/s here as JSON")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="pages extracted at once, each in its own sandbox process (0: one per CPU core; "
                             "default 1); the output is the same for any N")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if not args.dir.is_dir():
        parser.error(f"{args.dir} is not a folder: give the folder that holds the .html / .html.gz files")
    cfg = load_jobs_config(args.override).extract
    workers = args.workers or os.cpu_count() or 1
    if workers < 0:
        parser.error(f"--workers {args.workers}: give 0 (one per CPU core) or more")
    if workers > 1 and not cfg.sandbox:
        parser.error(f"--workers {workers} runs one sandbox process per worker: drop extract.sandbox=false, "
                     "or use --workers 1")
    stats = extract_files(args.dir, args.out, cfg, workers=workers)
    print(report(stats, args.out), file=sys.stderr)
    if args.stats:
        args.stats.write_text(json.dumps(stats.as_dict(), indent=1) + "\n")
    return 0


if __name__ == "__main__":  # the sandbox's spawn child re-imports this module: keep work under the guard
    sys.exit(main())
