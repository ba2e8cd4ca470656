"""Benchmark: the whole silver pass, bronze.pages -> silver.documents -> silver.signals -> silver.quality, on Spark
against the same per-document functions in one process, over the same real pages, in the same run.
Goal (issue 11): Spark overhead <= 1.3x; and which stage costs most.

    .venv/bin/python bench/silver_pass.py [REPEAT]

Pages: the 1,497 real HTML pages of WCXB dev (../shared/data/extraction/wcxb_dev, 7 page types, as served), with
their URLs, repeated REPEAT times (default 1) under distinct doc_ids; skips cleanly when the set is absent.
  spark:      `ExtractJob --full` then `QualityJob --full` on local[2] (2 cores), with every write: bronze.pages
              (Delta) -> mapInPandas through the extraction sandbox's child process -> silver.documents (MERGE) ->
              mapInArrow signals -> silver.signals (MERGE) -> filter view -> redaction -> silver.quality (MERGE).
              Timed after one untimed run of both jobs that creates the tables and warms the JVM and Python workers.
  in-process: `extract_document` on each page (no sandbox), then `signals.score_texts` per batch of
              `quality.batch_rows` texts and `pii.redact` of the documents the quality job kept: one process, one core.
Ratios, per stage and for the pass: Spark wall seconds / in-process seconds (the issue's measure: 2 cores against
one), and core-seconds (Spark's 2 cores x its wall seconds / in-process seconds: the overhead per core, which a
cluster's executors pay too).  Prints one JSON line at the end.  bronze.pages is written from this process as one
file (deltalake), the layout in which extraction ran as one task before `jobs.extract.spread`.

Measured on this project's 2-core machine, WCXB dev x 1 (1,497 pages, 416 MB of HTML), seconds (Spark / in-process):
| | extract | quality | whole pass, ratio | whole pass, core-seconds ratio |
|---|---|---|---|---|
| one task per bronze file, 1g heap, 256-row Parquet batches | 108.8 / 90.2 | 34.7 / 20.7 | 1.295 | 2.590 |
| `spread` (2 tasks per core), conf/jobs.yaml's 2g heap and 128-row batches | 67.2 / 88.1 | 25.1 / 18.6 | 0.865 | 1.729 |
With Spark's own 4096-row Parquet batches and 1g heap the extract job died reading bronze (OutOfMemoryError).
Extraction is 83 % of the in-process pass.
"""
from __future__ import annotations

import gzip
import json
import logging
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extraction_quality import DATA, load_wcxb_dev, wcxb_scorer  # noqa: E402
from bench.quality_overhead import in_process as quality_in_process  # noqa: E402

CORES = 2
GOAL = 1.3


def real_pages(repeat: int) -> list[tuple[str, str, bytes]] | None:
    """(doc_id, url, html as served) per page, the set repeated `repeat` times; None when WCXB dev is absent."""
    scorer = wcxb_scorer()
    if scorer is None:
        return None
    base = [(page.url or f"http://wcxb.test/{page.id}", gzip.decompress(page.html_gz.read_bytes()))
            for page in load_wcxb_dev(scorer)]
    return [(f"p{copy}-{i:05d}", url, html) for copy in range(repeat) for i, (url, html) in enumerate(base)]


def write_bronze(lake: Path, pages) -> None:
    """`bronze.pages` of the lake at `lake`: one 200 text/html row per page, as ingest writes them.  Written with
    deltalake from this process: a driver-side createDataFrame of ~400 MB of HTML would need the JVM to hold it all."""
    from urllib.parse import urlsplit

    import pyarrow as pa
    from deltalake import write_deltalake
    from pyspark.sql.pandas.types import to_arrow_schema

    from jobs.ingest import bronze_schema

    schema = to_arrow_schema(bronze_schema(), timezone="UTC")
    fetched = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [{"doc_id": doc_id, "url": url, "host": urlsplit(url).hostname or "", "fetch_time": fetched, "status": 200,
             "content_type": "text/html", "headers": [], "html": html, "warc_file": "bench.warc.gz", "warc_offset": i,
             "warc_record_id": f"<urn:uuid:{doc_id}>"} for i, (doc_id, url, html) in enumerate(pages)]
    write_deltalake(str(lake / "bronze" / "pages"), pa.Table.from_pylist(rows, schema=schema))


def extract_in_process(pages, cfg) -> tuple[float, list[str | None]]:
    """Seconds of `extract_document` over every page in this process, and each page's text (None: skipped)."""
    from jobs.text.main_text import Extracted, extract_document

    start = time.perf_counter()
    texts = []
    for _, url, html in pages:
        result = extract_document(html, 200, "text/html", None, url, cfg)
        texts.append(result.text if isinstance(result, Extracted) else None)
    return time.perf_counter() - start, texts


def timed(job, args: list[str]) -> tuple[float, object]:
    start = time.perf_counter()
    metrics = job().run(args)
    return time.perf_counter() - start, metrics


def stage_row(spark_s: float, bare_s: float, docs: int) -> dict:
    return {"documents": docs, "spark_local2_s": round(spark_s, 2), "spark_docs_per_s": round(docs / spark_s, 1),
            "in_process_1core_s": round(bare_s, 2), "in_process_docs_per_s": round(docs / bare_s, 1),
            "spark_over_in_process": round(spark_s / bare_s, 3),
            "core_seconds_ratio": round(CORES * spark_s / bare_s, 3)}


def main() -> int:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    pages = real_pages(repeat)
    if pages is None:
        print(json.dumps({"skipped": f"{DATA / 'wcxb_dev'} is absent (the shared data is not beside this checkout)"}))
        return 0
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    print(f"{len(pages)} pages ({len(pages) // repeat} WCXB dev pages x {repeat}), "
          f"{sum(len(h) for _, _, h in pages) / 1e6:.0f} MB of HTML", flush=True)

    from deltalake import DeltaTable

    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config
    from jobs.extract import ExtractJob
    from jobs.quality.job import QualityJob

    cfg = load_jobs_config([f"spark.shuffle_partitions={CORES}"])
    spark, _ = build_session(cfg, load_paths(), f"local[{CORES}]", "weblm-bench-silver-pass")
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        write_bronze(lake, pages)
        args = ["--lake", str(lake), "-o", f"spark.shuffle_partitions={CORES}"]
        for job in (ExtractJob, QualityJob):   # creates the tables; warms the JVM and the Python workers (untimed)
            job().run(args)
        extract_s, extract_metrics = timed(ExtractJob, args + ["--full"])
        quality_s, quality_metrics = timed(QualityJob, args + ["--full"])
        silver = DeltaTable(str(lake / "silver" / "documents")).to_pyarrow_table(columns=["doc_id"])
        kept_ids = set(DeltaTable(str(lake / "silver" / "quality")).to_pyarrow_table(columns=["doc_id"])
                       .column("doc_id").to_pylist())
    spark.stop()

    bare_extract_s, texts = extract_in_process(pages, cfg.extract)
    extracted = [(doc_id, text) for (doc_id, _, _), text in zip(pages, texts) if text is not None]
    kept = {i for i, (doc_id, _) in enumerate(extracted) if doc_id in kept_ids}
    bare_quality_s = quality_in_process([text for _, text in extracted], kept, cfg.quality.batch_rows)

    stages = {"extract": stage_row(extract_s, bare_extract_s, len(pages)),
              "quality": stage_row(quality_s, bare_quality_s, len(extracted))}
    whole = stage_row(extract_s + quality_s, bare_extract_s + bare_quality_s, len(pages))
    costliest = max(stages, key=lambda s: stages[s]["in_process_1core_s"])
    for name, row in {**stages, "whole pass": whole}.items():
        print(f"{name:>10}: Spark local[{CORES}] {row['spark_local2_s']:7.1f} s ({row['spark_docs_per_s']:6.1f} docs/s)"
              f"  in-process {row['in_process_1core_s']:7.1f} s ({row['in_process_docs_per_s']:6.1f} docs/s)"
              f"  Spark / in-process {row['spark_over_in_process']:.3f}  core-seconds {row['core_seconds_ratio']:.3f}")
    share = {name: round(row["in_process_1core_s"] / whole["in_process_1core_s"], 3) for name, row in stages.items()}
    verdict = "met" if whole["spark_over_in_process"] <= GOAL else "missed"
    print(f"costliest stage: {costliest} ({share[costliest]:.0%} of the in-process pass); "
          f"goal Spark / in-process <= {GOAL}: {verdict}")
    print(json.dumps({"pages": len(pages), "silver_documents": silver.num_rows, "quality_kept": len(kept_ids),
                      "agree_extracted": silver.num_rows == len(extracted), "stages": stages, "whole_pass": whole,
                      "in_process_share": share, "costliest": costliest, "goal": GOAL, "goal_verdict": verdict,
                      "extract_skipped": dict(extract_metrics.skipped),
                      "quality_skipped": dict(quality_metrics.skipped)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
