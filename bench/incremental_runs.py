"""Benchmark: incremental pipeline runs against full runs, on the same WARC records, in one process.

    .venv/bin/python bench/incremental_runs.py [WARC_DIR] [NEW_FRACTION]

WARC_DIR defaults to the last `make demo` crawl (paths.warc_dir), else the shared replay WARC
(../shared/data/warc/pywb/warcs/iana.warc.gz).  Its fetches are split into a "first crawl" and a
"new crawl" holding every k-th fetch (k = 1 / NEW_FRACTION, default 10: 10% of the records).  Then,
on one local Spark session, each stage timed from its own metrics:
  1. full run over the first crawl, on an empty lake;
  2. the same again with nothing new: every table must keep its version;
  3. the new crawl's file added: an incremental run;
  4. a full run over both crawls, on an empty lake: the baseline for step 3.
Prints per-stage seconds and the ratios (2 / 1) and (3 / 4).
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from conf.paths import load_paths

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "warc" / "pywb" / "warcs" / "iana.warc.gz"
STAGES = ("ingest", "extract", "tokenize", "export")
TABLES = ("bronze/pages", "silver/documents", "gold/tokens")


def record_spans(path: Path) -> list[tuple[int, int]]:
    with open(path, "rb") as stream:
        records = ArchiveIterator(stream)
        spans = []
        for record in records:
            record.content_stream().read()
            spans.append((records.get_record_offset(), records.get_record_length()))
    return spans


def split(files: list[Path], new_fraction: float, out: Path) -> tuple[Path, Path, int, int]:
    """Copy the records, byte for byte (each is its own gzip member), into a first and a new crawl.

    Every k-th fetch (a request and its response, adjacent in the spider's files) goes to the new crawl,
    so that it holds the same mix of pages as the first: a crawl's tail is mostly error pages."""
    spans = [(f, offset, length) for f in files for offset, length in record_spans(f)]
    every = max(1, round(1 / new_fraction))
    new_part = [span for i, span in enumerate(spans) if (i // 2) % every == every - 1]
    chosen = set(new_part)
    first_part = [span for span in spans if span not in chosen]
    cut = len(first_part)
    first, new = out / "first" / "crawl-1.warc.gz", out / "new" / "crawl-2.warc.gz"
    for target, part in ((first, first_part), (new, new_part)):
        target.parent.mkdir(parents=True)
        with open(target, "wb") as sink:
            for f, offset, length in part:
                with open(f, "rb") as source:
                    source.seek(offset)
                    sink.write(source.read(length))
    return first, new, cut, len(spans) - cut


def run(var: Path, *extra: str) -> dict[str, float]:
    import json

    from jobs.pipeline import run as pipeline

    started = time.monotonic()
    code = pipeline(["-p", f"var={var}", *extra])
    if code != 0:
        raise SystemExit(f"pipeline failed ({code}) on {var}")
    state = json.loads((var / "lake" / "_pipeline" / "state.json").read_text())
    times = {s: state["stages"][s]["seconds"] for s in STAGES}
    times["total"] = time.monotonic() - started
    rows = {s: state["stages"][s]["input_rows"] for s in STAGES}
    print(f"[bench] {var.name}: rows in per stage {rows}")
    return times


def versions(var: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    return {t: DeltaTable(str(var / "lake" / t)).version() for t in TABLES}


def input_files(warc_dir: str | None) -> list[Path]:
    """WARC_DIR's files, else the last `make demo` crawl's, else the shared replay WARC; [] (said) when none."""
    source = Path(warc_dir) if warc_dir else Path(load_paths().warc_dir)
    files = sorted(source.glob("*.warc.gz")) if source.is_dir() else []
    if files:
        return files
    if SHARED.exists():
        return [SHARED]
    print(f"skipped: no WARC files in {source} (run `make demo` first) and no shared data at {SHARED}")
    return []


def main(warc_dir: str | None, new_fraction: float) -> int:
    files = input_files(warc_dir)
    if not files:
        return 0
    with tempfile.TemporaryDirectory(prefix="weblm-bench-incremental-") as tmp:
        tmp = Path(tmp)
        first, new, n_first, n_new = split(files, new_fraction, tmp / "input")
        print(f"input: {len(files)} WARC file(s) from {files[0].parent}: {n_first} records first, {n_new} new "
              f"({n_new / (n_first + n_new):.0%})")
        lake, baseline = tmp / "incremental", tmp / "full"
        for var in (lake, baseline):
            (var / "warc").mkdir(parents=True)
        (lake / "warc" / first.name).write_bytes(first.read_bytes())
        full_first = run(lake)
        before = versions(lake)
        nothing_new = run(lake)
        unchanged = versions(lake) == before
        (lake / "warc" / new.name).write_bytes(new.read_bytes())
        incremental = run(lake)
        for part in (first, new):
            (baseline / "warc" / part.name).write_bytes(part.read_bytes())
        full_all = run(baseline)
    print(f"{'stage':<10}{'full(first)':>12}{'nothing new':>12}{'ratio':>8}{'+new inc.':>12}{'full(all)':>11}{'ratio':>8}")
    for stage in (*STAGES, "total"):
        print(f"{stage:<10}{full_first[stage]:>11.1f}s{nothing_new[stage]:>11.1f}s"
              f"{nothing_new[stage] / max(full_first[stage], 1e-9):>8.2f}"
              f"{incremental[stage]:>11.1f}s{full_all[stage]:>10.1f}s{incremental[stage] / max(full_all[stage], 1e-9):>8.2f}")
    print(f"tables unchanged by the run with nothing new: {unchanged} (versions {before})")
    return 0 if unchanged else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None, float(sys.argv[2]) if len(sys.argv) > 2 else 0.1))
