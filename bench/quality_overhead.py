"""Benchmark: the quality stage's whole silver pass on Spark against the same per-document functions in one
process, over the same real documents, in the same run; which signal costs most; language ID on real pages.
Goal: Spark overhead <= 1.3x (Spark seconds / in-process seconds).

    .venv/bin/python bench/quality_overhead.py [REPEAT]

Documents: the main text of the 1,497 real pages of WCXB dev (../shared/data/extraction/wcxb_dev, ground truth:
articles, forums, products, listings, ...), plus the 30 Common Crawl documents of ../shared/data/text/cc_text_samples,
repeated REPEAT times (default 2) with distinct doc_ids.
  in-process: `signals.score_texts` per batch of `quality.batch_rows` texts (language ID, heuristics, PII counts)
              plus `pii.redact` of the documents the job kept: one Python process, one core.
  spark:      `QualityJob --full` on local[2] (2 cores): silver.documents (Delta) -> mapInArrow -> silver.signals
              (Delta MERGE) -> filter view -> redaction -> silver.quality (Delta MERGE), i.e. the whole pass with
              its writes.  Timed after one untimed run that creates the tables.
Prints per-signal seconds, language ID on the real pages (and agreement with CCNet's own labels), one JSON line.
"""
from __future__ import annotations

import gzip
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
WCXB = DATA / "extraction" / "wcxb_dev" / "dev" / "ground-truth"
CC = DATA / "text" / "cc_text_samples"


def real_pages() -> tuple[list[str], list[tuple[str, str, float]]]:
    """(texts, CC documents as (text, CCNet language, CCNet language_score))."""
    truths = [json.loads(p.read_text())["ground_truth"] for p in sorted(WCXB.glob("*.json"))]
    texts = [t["main_content"] for t in truths if isinstance(t.get("main_content"), str)]  # 2 pages have none
    cc = []
    for path in sorted(CC.glob("*.gz")):
        for line in gzip.open(path, "rt"):
            doc = json.loads(line)
            meta = doc.get("metadata") or {}
            cc.append((doc["text"], meta.get("language"), meta.get("language_score")))
    return texts + [t for t, _, _ in cc], cc


def per_signal_seconds(texts: list[str]) -> dict[str, float]:
    from jobs.quality import heuristics as h
    from jobs.quality import langid, pii

    params = h.SignalParams()
    words = [h.words_of(t) for t in texts]
    parts = {
        "langid (lid.176)": lambda: langid.identify(texts),
        "word split": lambda: [h.words_of(t) for t in texts],
        "bad_input": lambda: [h.bad_input(t) for t in texts],
        "gopher_quality": lambda: [h.gopher_quality(t, w) for t, w in zip(texts, words)],
        "gopher_repetition": lambda: [h.gopher_repetition(t, w) for t, w in zip(texts, words)],
        "c4": lambda: [h.c4(t, params) for t in texts],
        "fineweb": lambda: [h.fineweb(t, w, params) for t, w in zip(texts, words)],
        "pii (count)": lambda: [pii.counts(t) for t in texts],
    }
    langid.model()  # loading is once per worker: not part of the per-document cost
    out = {}
    for name, fn in parts.items():
        start = time.perf_counter()
        fn()
        out[name] = round(time.perf_counter() - start, 3)
    return out


def in_process(texts: list[str], kept: set[int], batch_rows: int) -> float:
    from jobs.quality import heuristics, pii, signals

    start = time.perf_counter()
    for i in range(0, len(texts), batch_rows):
        signals.score_texts(texts[i:i + batch_rows], heuristics.SignalParams())
    for i in kept:
        pii.redact(texts[i])
    return time.perf_counter() - start


def write_documents(spark, lake: Path, ids: list[str], texts: list[str]) -> None:
    """`silver.documents` of the lake at `lake`, one row per text, as the extract job writes it."""
    from pyspark.sql import functions as F

    rows = spark.createDataFrame(list(zip(ids, texts)), "doc_id string, text string").repartition(2)
    (rows.withColumn("url", F.concat(F.lit("http://bench.test/"), "doc_id")).withColumn("host", F.lit("bench.test"))
     .withColumn("fetch_time", F.current_timestamp()).withColumn("title", F.lit(None).cast("string"))
     .withColumn("language", F.lit("und")).withColumn("n_chars", F.length("text"))
     .withColumn("warc_file", F.lit("bench.warc.gz")).withColumn("warc_offset", F.lit(0).cast("long"))
     .withColumn("content_sha256", F.sha2("text", 256))
     .write.format("delta").save(str(lake / "silver" / "documents")))


def bench_documents(argv: list[str]):
    """(real pages, CC documents, texts, doc_ids): the real pages repeated argv[1] times (default 2) with distinct
    doc_ids; None, with the reason printed as a JSON line, when the shared data is absent."""
    repeat = int(argv[1]) if len(argv) > 1 else 2
    if not WCXB.is_dir():
        print(json.dumps({"skipped": f"{WCXB} is absent"}))
        return None
    base, cc = real_pages()
    texts = base * repeat
    print(f"{len(texts)} documents ({len(base)} real pages x {repeat}), {sum(map(len, texts)) / 1e6:.1f} M chars",
          flush=True)
    return base, cc, texts, [f"d{i:07d}" for i in range(len(texts))]


def main() -> None:
    documents = bench_documents(sys.argv)
    if documents is None:
        return
    base, cc, texts, ids = documents

    from jobs.quality import langid
    langs, scores = langid.identify(base)
    by_lang = Counter(langs)
    confident = sum(s >= 0.65 for s in scores)
    cc_langs, cc_scores = langid.identify([t for t, _, _ in cc])
    agree = sum(a == b for a, (_, b, _) in zip(cc_langs, cc))
    score_diff = statistics.mean(abs(a - (s or 0)) for a, (_, _, s) in zip(cc_scores, cc)) if cc else None
    print(f"language ID on {len(base)} real pages: {dict(by_lang.most_common(8))}; "
          f"{confident} ({confident / len(base):.1%}) at score >= 0.65; "
          f"agrees with CCNet's label on {agree}/{len(cc)} CC documents (mean |score difference| {score_diff:.3f})",
          flush=True)

    costs = per_signal_seconds(base)
    total = sum(v for k, v in costs.items())
    print("per-signal seconds over the real pages (one core): "
          + ", ".join(f"{k} {v:.2f} ({v / total:.0%})" for k, v in sorted(costs.items(), key=lambda kv: -kv[1])),
          flush=True)

    from deltalake import DeltaTable

    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config
    from jobs.quality.job import QualityJob

    cfg = load_jobs_config(["spark.shuffle_partitions=2"])
    spark, _ = build_session(cfg, load_paths(), "local[2]", "weblm-bench-quality")
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        write_documents(spark, lake, ids, texts)
        args = ["--lake", str(lake), "-o", "spark.shuffle_partitions=2"]
        QualityJob().run(args)   # creates the tables; warms the JVM and the Python workers (untimed)
        start = time.perf_counter()
        metrics = QualityJob().run(args + ["--full"])
        spark_s = time.perf_counter() - start
        kept_ids = set(DeltaTable(str(lake / "silver" / "quality")).to_pyarrow_table(columns=["doc_id"])
                       .column("doc_id").to_pylist())
    spark.stop()
    kept = {i for i, d in enumerate(ids) if d in kept_ids}
    bare_s = in_process(texts, kept, cfg.quality.batch_rows)
    result = {
        "documents": len(texts), "kept": len(kept), "spark_local2_s": round(spark_s, 2),
        "spark_docs_per_s": round(len(texts) / spark_s, 1), "in_process_1core_s": round(bare_s, 2),
        "in_process_docs_per_s": round(len(texts) / bare_s, 1), "spark_over_in_process": round(spark_s / bare_s, 3),
        "signals_computed": metrics.extra.get("signals_computed"), "dropped": dict(metrics.skipped),
        "per_signal_s": costs, "langid": {"languages": dict(by_lang.most_common(12)), "confident_065": confident,
                                           "pages": len(base), "cc_agree": agree, "cc_docs": len(cc)},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
