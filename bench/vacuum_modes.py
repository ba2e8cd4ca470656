"""Benchmark: maintain's VACUUM, full against lite (`maintain.vacuum`), on an S3 API server and on local disk.

    .venv/bin/python bench/vacuum_modes.py [--live 2000] [--rewrites 0] [--deletes 5] [--runs 2]
                                           [--store both|s3|local]

Per run and mode, a fresh Delta table of --live files, each a range of ids (one Spark session, local[2]), overwritten
whole --rewrites times (each retires --live files) and then changed by --deletes DELETEs of a few rows (each
retires one file: an incremental run's MERGE touches few files of a large table), so that
--live x --rewrites + --deletes files are out of use; then `VACUUM ... [LITE] RETAIN 0 HOURS` as jobs/maintain.py
runs it, timed alone; the two modes alternate (full, lite, lite, full, ...) so that a warming JVM or a filling
bucket falls on both.  The S3 server is the tests' harness, moto's server mode on 127.0.0.1 reached through s3a
(conf/storage.yaml pointed at it by an overlay): listing a folder there is HTTP round trips, as on S3, but without a
network's latency, so the saving measured here is a lower bound of what S3 would give, not its figure.  Prints each
run, the medians and lite/full per store, and checks that both modes deleted the same files.

Measured (2026-12-05, 2 cores, moto 5.2, delta-spark 4.4; each mode deleted every retired file in every run):
- defaults (2,000 live files, 5 retired by DELETEs): local full 2.85 s / lite 2.38 s (median, lite/full 0.835);
  S3 server full 2.48 s / lite 2.19 s (0.883).  The warm second runs: local 1.86 / 2.15 s, S3 2.43 / 2.11 s.
- `--live 200 --rewrites 4` (800 retired): local 3.17 / 2.50 s (0.789), S3 8.52 / 8.41 s (0.987): deleting 800
  objects costs the same either way, and listing 1,000 is a single request.
So at a few thousand files LITE saves at most a few tenths of a second here; what it saves on a real bucket of
millions of files (a listing of thousands of pages over a network) is not measured.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.s3server import CREDENTIALS, S3Server, make_bucket, storage_overlay  # noqa: E402


def session():
    from conf.paths import load_paths
    from jobs.base import apply_storage_conf, build_session
    from jobs.config import load_jobs_config

    spark = build_session(load_jobs_config(), load_paths(), "local[2]", "bench-vacuum-modes")[0]
    apply_storage_conf(spark)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.conf.set("spark.databricks.delta.vacuum.logging.enabled", "true")
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.parallelism", "4")   # maintain's default here
    return spark


def one_run(spark, uri: str, mode: str, live: int, rewrites: int, deletes: int) -> tuple[float, int]:
    """Seconds the VACUUM took and the files it deleted, on a fresh table at `uri`."""
    from delta.tables import DeltaTable

    rows = spark.range(live * 100).repartitionByRange(live, "id")
    rows.write.format("delta").save(uri)
    for _ in range(rewrites):
        rows.write.format("delta").mode("overwrite").save(uri)
    for n in range(deletes):   # ids n*100 .. n*100+9 sit in one file: that file alone is rewritten
        spark.sql(f"DELETE FROM delta.`{uri}` WHERE id >= {n * 100} AND id < {n * 100 + 10}")
    started = time.perf_counter()
    spark.sql(f"VACUUM delta.`{uri}` {'LITE ' if mode == 'lite' else ''}RETAIN 0 HOURS").collect()
    seconds = time.perf_counter() - started
    start = DeltaTable.forPath(spark, uri).history().where("operation = 'VACUUM START'").first()
    return seconds, int(start["operationMetrics"]["numFilesToDelete"])


def measure(spark, base: str, args) -> dict[str, list[tuple[float, int]]]:
    import storage

    out: dict[str, list[tuple[float, int]]] = {"full": [], "lite": []}
    order = ["full", "lite"]
    for n in range(args.runs):
        for mode in (order if n % 2 == 0 else order[::-1]):
            uri = storage.spark_uri(storage.join(base, f"run{n}-{mode}"))
            seconds, deleted = one_run(spark, uri, mode, args.live, args.rewrites, args.deletes)
            out[mode].append((seconds, deleted))
            print(f"  run {n} {mode:<4}: {seconds:7.2f} s, {deleted} files deleted", flush=True)
    return out


def summary(store: str, results: dict, expected: int) -> None:
    full, lite = (statistics.median(s for s, _ in results[m]) for m in ("full", "lite"))
    deleted = {d for runs in results.values() for _, d in runs}
    same = "both deleted every retired file" if deleted == {expected} else f"files deleted differ: {sorted(deleted)}"
    print(f"  {store}: full median {full:.2f} s, lite median {lite:.2f} s, lite/full {lite / full:.3f} ({same})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--live", type=int, default=2000, help="files the table uses")
    ap.add_argument("--rewrites", type=int, default=0, help="whole overwrites before the VACUUM (each retires --live)")
    ap.add_argument("--deletes", type=int, default=5, help="DELETEs of a few rows (each retires one file)")
    ap.add_argument("--runs", type=int, default=2, help="runs per mode and store")
    ap.add_argument("--store", choices=("both", "s3", "local"), default="both")
    args = ap.parse_args()
    stores = ["local", "s3"] if args.store == "both" else [args.store]
    with tempfile.TemporaryDirectory(prefix="weblm-bench-vacuum-") as tmp:
        tmp = Path(tmp)
        server = S3Server(tmp) if "s3" in stores else None
        try:
            if server is not None:   # before the session: the overlay and credentials are read when it starts
                os.environ["WEBLM_CONF_OVERLAY"] = str(storage_overlay(tmp / "s3.yaml", server.endpoint))
                os.environ.update(CREDENTIALS)
            spark = session()
            retired = args.live * args.rewrites + args.deletes
            print(f"tables of {args.live} live files, {retired} retired; {args.runs} run(s) per mode, alternating")
            results = {}
            for store in stores:
                base = make_bucket(server.endpoint, "weblm-vacuum") if store == "s3" else str(tmp / "local")
                print(f"{store}:")
                results[store] = measure(spark, base, args)
            print("\nSUMMARY")
            for store, result in results.items():
                summary(store, result, args.live * args.rewrites + args.deletes)
            spark.stop()
        finally:
            if server is not None:
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
