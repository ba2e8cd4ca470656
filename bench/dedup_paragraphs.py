"""Benchmark: paragraph dedup (jobs.dedup.paragraphs) against the row-per-line plan, in one Spark session.

    .venv/bin/python bench/dedup_paragraphs.py [--docs 100000] [--repeats 1] [--data /tmp/weblm-dedup-paragraphs]

Documents from bench/dedup_scale.py's generator (boilerplate lines, near and exact copies), kept as Parquet
under --data (never in the repository).  The baseline is the textbook Spark plan, which weblm ran before:
every line exploded into a row, hashed in a Python batch per row group, `groupBy(key)` for the document count
and the first document, a join back to the lines, a window for repeats inside a document, `collect_set` of
positions per document, a join of every document to its positions.  Both run on the same persisted documents
with conf/jobs.yaml's `dedup.paragraphs` settings; the bench checks that they give the same result (documents
dropped as too short, paragraphs removed, a checksum of every output text) and prints wall and CPU seconds
(this process tree: driver JVM and Python workers) for each, and the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def baseline_keys(batches: Iterator) -> Iterator:
    """(doc_id, pos, line, q, t) -> the same less `line`, plus `key` (the line's normalized words, hashed)."""
    import pyarrow as pa

    from jobs.dedup.normalize import hash_keys, word_hashes_of_batch

    for batch in batches:
        hashes, offsets = word_hashes_of_batch(batch.column("line"))
        names = [n for n in batch.schema.names if n != "line"]
        yield pa.RecordBatch.from_arrays([*(batch.column(n) for n in names), pa.array(hash_keys(hashes, offsets), pa.string())],
                                         names=[*names, "key"])


def baseline(docs, cfg):
    """The row-per-line plan (same rules and output columns as `jobs.dedup.paragraphs.dedup_paragraphs`)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keyed = (docs.select("doc_id", F.coalesce(-F.col("p_quality").cast("double"), F.lit(float("inf"))).alias("q"),
                         F.coalesce(-F.unix_micros("p_time"), F.lit(2**62)).alias("t"),
                         F.posexplode(F.split("text", "\n")).alias("pos", "line"))
             .select("doc_id", F.col("pos").cast("int").alias("pos"), "line", "q", "t")
             .mapInArrow(baseline_keys, "doc_id string, pos int, q double, t long, key string")
             .where(F.col("key").isNotNull()).persist(StorageLevel.MEMORY_AND_DISK))
    stats = (keyed.groupBy("key").agg(F.countDistinct("doc_id").alias("n_docs"),
                                      F.min_by("doc_id", F.struct("q", "t", "doc_id", "pos")).alias("first_doc")))
    removed = (keyed.join(stats, "key")
               .withColumn("nth", F.row_number().over(Window.partitionBy("key", "doc_id").orderBy("pos")))
               .where((F.lit(cfg.within_doc) & (F.col("nth") > 1))
                      | ((F.col("n_docs") > cfg.max_docs) & (F.col("doc_id") != F.col("first_doc"))))
               .groupBy("doc_id").agg(F.collect_set("pos").alias("removed")))
    n_removed = F.when(F.col("removed").isNull(), F.lit(0)).otherwise(F.size("removed"))
    text = F.concat_ws("\n", F.expr("transform(split(text, '\\n'), (l, i) -> "
                                    "if(removed IS NOT NULL AND array_contains(removed, i), null, l))")) \
        if cfg.mode == "remove" else F.col("text")
    short = (n_removed > 0) & (F.length(text) < cfg.min_doc_chars) & F.lit(cfg.mode == "remove")
    out = (docs.select("doc_id", "text").join(removed, "doc_id", "left")
           .select("doc_id", text.alias("text"), n_removed.alias("paragraphs_removed"),
                   F.when(short, F.lit("too_short_after_paragraphs")).alias("drop_reason")))
    return out, keyed


def cpu_seconds() -> float:
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--data", default="/tmp/weblm-dedup-paragraphs")
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dedup_scale import generated_chunks

    path = Path(args.data) / f"docs-{args.docs}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(pa.table({"doc_id": ids, "text": texts})
                                        for ids, texts, _ in generated_chunks(args.docs)), path)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config
    from jobs.dedup import paragraphs

    cfg = load_jobs_config([])
    spark, _ = build_session(cfg, load_paths(), "local[2]", "weblm-bench-dedup-paragraphs")
    spark.sparkContext.setLogLevel("ERROR")
    # as the dedup job sizes them (DedupJob.partitions_for)
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, -(-args.docs // cfg.dedup.docs_per_shuffle_partition))))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(cfg.dedup.minhash.batch_rows))
    docs = (spark.read.parquet(str(path)).select("doc_id", "text", F.lit(None).cast("double").alias("p_quality"),
                                                 F.lit(None).cast("timestamp").alias("p_time"))
            .persist(StorageLevel.MEMORY_AND_DISK))
    docs.count()
    summary = [F.count_if(F.col("drop_reason").isNotNull()).alias("too_short"),
               F.sum("paragraphs_removed").alias("paragraphs_removed"), F.sum(F.crc32("text")).alias("text_crc_sum")]
    results: dict = {}
    for _ in range(args.repeats):
        for name in ("baseline", "weblm"):
            c0, t0 = cpu_seconds(), time.monotonic()
            if name == "baseline":
                out, keyed = baseline(docs, cfg.dedup.paragraphs)
            else:
                out, keyed = paragraphs.dedup_paragraphs(docs, cfg.dedup.paragraphs), None
            got = out.agg(*summary).first().asDict()
            if keyed is not None:
                keyed.unpersist()
            row = {"plan": name, "documents": args.docs, "wall_s": round(time.monotonic() - t0, 1),
                   "cpu_s": round(cpu_seconds() - c0, 1), "load_1m": round(os.getloadavg()[0], 1), **got}
            print(json.dumps(row), flush=True)
            results.setdefault(name, []).append(row)
    base, new = results["baseline"], results["weblm"]
    same = all({k: r[k] for k in ("too_short", "paragraphs_removed", "text_crc_sum")}
               == {k: n[k] for k in ("too_short", "paragraphs_removed", "text_crc_sum")} for r, n in zip(base, new))
    print(json.dumps({"same_result": same,
                      "wall_ratio": round(sum(r["wall_s"] for r in base) / max(sum(r["wall_s"] for r in new), 1e-9), 2),
                      "cpu_ratio": round(sum(r["cpu_s"] for r in base) / max(sum(r["cpu_s"] for r in new), 1e-9), 2)}))
    spark.stop()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
