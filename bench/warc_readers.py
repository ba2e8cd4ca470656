"""Benchmark: reading WARC records with FastWARC vs warcio (the baseline), same process, same files.

    .venv/bin/python bench/warc_readers.py [ROUNDS]

Reads every WARC/ARC file under ../shared/data/warc (skips cleanly when absent), in memory so that
disk speed does not count, and prints:
- which variants each library reads (gz, plain, lz4, ARC, ARC.gz, single-stream gzip, broken files):
  records read, and the error it stopped on;
- records/s over the files both read, for what ingest does with a record: warcio's ArchiveIterator
  with `content_stream()` on responses (the baseline) vs FastWARC framing the records with warcio's
  HTTP parsing and decoding inside them (`jobs.warc.readers`, what ingest uses), and FastWARC alone
  (its own HTTP parser and decoder, which ingest does not use: see jobs/warc/readers.py);
- the ratio against the baseline.  Target: ingest's reader at least 1.5x warcio.
"""
from __future__ import annotations

import io
import sys
import time
from collections import Counter
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "warc"
SUFFIXES = (".warc.gz", ".warc", ".warc.lz4", ".arc", ".arc.gz", ".bad")
TARGET_RATIO = 1.5


def variant(name: str) -> str:
    return next(s for s in SUFFIXES if name.endswith(s))


def warcio_read(data: bytes) -> int:
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    for record in ArchiveIterator(io.BytesIO(data), arc2warc=True):
        n += 1
        if record.rec_type == "response":
            record.content_stream().read()
    return n


def ingest_read(data: bytes) -> int:
    from jobs.warc.readers import FastWarcReader

    n = 0
    for record in FastWarcReader().records(io.BytesIO(data)):
        n += 1
        if record.rec_type == "response" and record.http_headers is not None:
            record.content_stream().read()
        record.finish()
    return n


def fastwarc_read(data: bytes) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    n = 0
    for record in ArchiveIterator(io.BytesIO(data), auto_decode="all"):
        n += 1
        if record.record_type == WarcRecordType.response:
            record.reader.read()
    return n


def coverage(files: dict[str, bytes]) -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = {}
    for name, data in files.items():
        table[name] = {}
        for label, read in (("warcio", warcio_read), ("fastwarc", ingest_read)):
            try:
                table[name][label] = str(read(data))
            except Exception as exc:  # noqa: BLE001  (a library's refusal is what this table reports)
                table[name][label] = f"stops: {type(exc).__name__}: {' '.join(str(exc).split())[:50]}"
    return table


def rate(read, datas: list[bytes], rounds: int) -> tuple[int, float]:
    started = time.perf_counter()
    records = sum(read(d) for _ in range(rounds) for d in datas)
    return records, records / (time.perf_counter() - started)


def main(rounds: int) -> int:
    import contextlib
    import logging

    logging.getLogger("warcio").setLevel(logging.ERROR)  # warcio warns on every quirky test file...
    quiet = contextlib.redirect_stderr(io.StringIO())  # ...and also writes some warnings straight to stderr
    paths = sorted(p for p in SHARED.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES)) if SHARED.is_dir() else []
    if not paths:
        print(f"skipped: no WARC files under {SHARED} (the shared data set is absent)")
        return 0
    files = {str(p.relative_to(SHARED)): p.read_bytes() for p in paths}
    with quiet:
        table = coverage(files)
    print(f"{len(files)} files, {sum(map(len, files.values())) / 1e6:.1f} MB, from {SHARED}")
    by_variant = Counter()
    for name, cells in table.items():
        by_variant[(variant(name), all(c.isdigit() for c in cells.values()))] += 1
        if cells["warcio"] != cells["fastwarc"]:
            print(f"  differ  {name:70s} warcio={cells['warcio']:45s} fastwarc={cells['fastwarc']}")
    for suffix in SUFFIXES:
        read_by = {lib: sum(table[n][lib].isdigit() for n in table if variant(n) == suffix)
                   for lib in ("warcio", "fastwarc")}
        total = sum(variant(n) == suffix for n in table)
        print(f"  {suffix:10s} {total:3d} files: warcio reads {read_by['warcio']:3d} to the end, "
              f"fastwarc {read_by['fastwarc']:3d}")
    both = [files[n] for n, cells in table.items() if all(c.isdigit() for c in cells.values())
            and variant(n) in (".warc.gz", ".warc")]
    with contextlib.redirect_stderr(io.StringIO()):
        for data in both[:3]:  # warm imports and caches
            warcio_read(data), ingest_read(data), _safe(fastwarc_read, data)
        records, baseline = rate(warcio_read, both, rounds)
        _, ingest = rate(ingest_read, both, rounds)
        fast_alone = rate(lambda d: _safe(fastwarc_read, d), both, rounds)[1]
    ratio = ingest / baseline
    print(f"{len(both)} files both libraries read to the end (.warc.gz, .warc), {rounds} rounds, {records} records")
    print(f"warcio (baseline):                       {baseline:9.0f} records/s")
    print(f"fastwarc framing + warcio HTTP (ingest):  {ingest:9.0f} records/s")
    print(f"fastwarc alone (its HTTP decoding):      {fast_alone:9.0f} records/s")
    print(f"ratio ingest/baseline: {ratio:.2f}  (target >= {TARGET_RATIO:.2f}: {'met' if ratio >= TARGET_RATIO else 'MISSED'}); "
          f"fastwarc alone/baseline: {fast_alone / baseline:.2f}")
    return 0


def _safe(read, data: bytes) -> int:
    try:
        return read(data)
    except Exception:  # noqa: BLE001  (FastWARC's chunked decoder stops on iana.warc.gz: counted as read so far)
        return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
