"""Benchmark: a scorer enabled on a scored lake, rescoring its own columns alone, against the whole rescore that
the quality job did before each scorer had its own hash (which is what `--full` with the scorer on still does).

    .venv/bin/python bench/quality_rescore.py [REPEAT]

Documents: those of bench/quality_overhead.py (WCXB dev's main texts and the cc_text_samples documents,
REPEAT times, default 2).  On Spark local[2], in one process: the quality job scores the lake with toxicity on
(untimed: it creates the tables and warms the JVM and the Python workers, which keep the loaded scorer), then,
timed, each a whole job run (signals, filter view, redaction, writes):
  disable:   toxicity off: its columns leave silver.signals, nothing is scored
  enable:    `quality.scorers.toxicity.enabled=true` (the scorer that needs no trained model): its columns alone
  unchanged: the same again: nothing to score
  baseline:  toxicity on with `--full`: every signal of every document (what enabling it cost before)
Prints the seconds of each run, the documents each one scored, and enable / baseline, as one JSON line.

Measured 2026-11-28 (3,050 documents, 2 cores): disable 17.9 s, enable 23.3 s, unchanged 12.6 s, baseline 40.3 s:
enable / baseline = 0.58x.  Above the unchanged run's floor (the filter view, redaction and writes that every run
does), enabling costs 10.6 s against 27.7 s.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.quality_overhead import bench_documents, write_documents  # noqa: E402

TOXICITY_ON = "quality.scorers.toxicity.enabled=true"


def main() -> None:
    documents = bench_documents(sys.argv)
    if documents is None:
        return
    _, _, texts, ids = documents
    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config
    from jobs.quality.job import QualityJob

    cfg = load_jobs_config(["spark.shuffle_partitions=2"])
    spark, _ = build_session(cfg, load_paths(), "local[2]", "weblm-bench-rescore")
    spark.sparkContext.setLogLevel("ERROR")
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        write_documents(spark, lake, ids, texts)
        args = ["--lake", str(lake), "-o", "spark.shuffle_partitions=2"]
        QualityJob().run(args + ["-o", TOXICITY_ON])   # untimed: the tables, the JVM, the workers' loaded scorer
        for name, extra in (("disable", []), ("enable", ["-o", TOXICITY_ON]), ("unchanged", ["-o", TOXICITY_ON]),
                            ("baseline", ["-o", TOXICITY_ON, "--full"])):
            start = time.perf_counter()
            metrics = QualityJob().run(args + extra)
            runs[name] = {"seconds": round(time.perf_counter() - start, 2),
                          "signals_computed": metrics.extra.get("signals_computed"),
                          "scorers_computed": metrics.extra.get("scorers_computed")}
            print(f"{name}: {runs[name]}", flush=True)
    spark.stop()
    ratio = runs["enable"]["seconds"] / runs["baseline"]["seconds"]
    print(f"enabling a scorer: {runs['enable']['seconds']:.1f} s against {runs['baseline']['seconds']:.1f} s for "
          f"the whole rescore ({ratio:.2f}x)")
    print(json.dumps({"documents": len(texts), "runs": runs, "enable_over_baseline": round(ratio, 3)}))


if __name__ == "__main__":
    main()
