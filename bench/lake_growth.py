"""Benchmark: how a lake grows over incremental runs, and what the `maintain` stage gives back, in one process.

    .venv/bin/python bench/lake_growth.py [WARC_DIR] [RUNS]

WARC_DIR defaults to the last `make demo` crawl (paths.warc_dir), else the shared replay WARC
(../shared/data/warc/pywb/warcs/iana.warc.gz).  Its fetches are dealt round-robin into RUNS files (default 4), and
the pipeline runs RUNS times on one lake, each run with one more file, its maintenance stage kept idle (compaction
from 10^9 files; nothing is older than the 168 h retention).  After each run: Parquet files and bytes on disk against
those the tables use.  Then `jobs.maintain` with retention 0 and compaction from 2 files, and the same count; then a
pipeline run with nothing new, whose `maintain` stage, on the defaults, has nothing due: its seconds against the
whole run's are what maintenance costs a run that has nothing to do.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from incremental_runs import input_files, record_spans  # noqa: E402  (bench/ is not a package)

IDLE = ["-o", "maintain.compact_min_files=1000000000"]


def deal(files: list[Path], parts: int, out: Path) -> list[Path]:
    """The fetches (request + response, adjacent) dealt round-robin into `parts` files, byte for byte."""
    spans = [(f, offset, length) for f in files for offset, length in record_spans(f)]
    targets = [out / f"crawl-{i + 1}.warc.gz" for i in range(parts)]
    out.mkdir(parents=True)
    for i, target in enumerate(targets):
        with open(target, "wb") as sink:
            for f, offset, length in (s for j, s in enumerate(spans) if (j // 2) % parts == i):
                with open(f, "rb") as source:
                    source.seek(offset)
                    sink.write(source.read(length))
    return targets


def lake_files(lake: Path) -> dict[str, int]:
    """Parquet files and bytes on disk, and those the tables' current versions use."""
    from deltalake import DeltaTable

    from jobs.maintain import lake_tables

    out = {"tables": 0, "files": 0, "bytes": 0, "used_files": 0, "used_bytes": 0}
    for _, path in lake_tables(str(lake)):
        on_disk = [p for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts]
        used = [Path(uri.removeprefix("file://")) for uri in DeltaTable(path).file_uris()]
        out["tables"] += 1
        out["files"] += len(on_disk)
        out["bytes"] += sum(p.stat().st_size for p in on_disk)
        out["used_files"] += len(used)
        out["used_bytes"] += sum(p.stat().st_size for p in used)
    return out


def pipeline(var: Path, *extra: str) -> dict:
    from jobs.pipeline import run

    code = run(["-p", f"var={var}", *extra])
    if code != 0:
        raise SystemExit(f"pipeline failed ({code}) on {var}")
    return json.loads((var / "lake" / "_pipeline" / "state.json").read_text())


def line(label: str, f: dict[str, int]) -> str:
    return (f"{label:<22}{f['files']:>7}{f['used_files']:>7}{f['bytes'] / 1e6:>10.2f}{f['used_bytes'] / 1e6:>10.2f}"
            f"{f['bytes'] / max(f['used_bytes'], 1):>8.2f}")


def main(warc_dir: str | None, runs: int) -> int:
    files = input_files(warc_dir)
    if not files:
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="weblm-bench-growth-") as tmp:
        var = Path(tmp) / "var"
        parts = deal(files, runs, Path(tmp) / "input")
        print(f"input: {len(files)} WARC file(s) from {files[0].parent}, dealt into {runs} files")
        (var / "warc").mkdir(parents=True)
        for i, part in enumerate(parts, 1):
            (var / "warc" / part.name).write_bytes(part.read_bytes())
            state = pipeline(var, *IDLE)
            rows.append((f"after run {i}", lake_files(var / "lake"),
                         sum(s.get("seconds") or 0 for s in state["stages"].values())))
        from jobs.maintain import MaintainJob

        started = time.monotonic()
        MaintainJob().run(["-p", f"var={var}", "-o", "maintain.retention_hours=0", "-o", "maintain.compact_min_files=2"])
        rows.append(("after maintain", lake_files(var / "lake"), time.monotonic() - started))
        state = pipeline(var)
        idle = state["stages"]["maintain"]["seconds"]
        total = sum(s["seconds"] for s in state["stages"].values())
    print(f"{'':<22}{'files':>7}{'used':>7}{'MB':>10}{'used MB':>10}{'ratio':>8}{'seconds':>9}")
    for label, f, seconds in rows:
        print(f"{line(label, f)}{seconds:>9.1f}")
    grown, kept = rows[-2][1], rows[-1][1]
    print(f"unused share of the bytes before maintain: {1 - grown['used_bytes'] / grown['bytes']:.1%}; "
          f"files {grown['files']} -> {kept['files']}, bytes on disk / used {grown['bytes'] / grown['used_bytes']:.2f}"
          f" -> {kept['bytes'] / kept['used_bytes']:.2f}")
    print(f"a run with nothing new: maintain {idle:.1f} s of {total:.1f} s ({idle / total:.1%}), nothing due")
    return 0 if kept["files"] == kept["used_files"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None, int(sys.argv[2]) if len(sys.argv) > 2 else 4))
