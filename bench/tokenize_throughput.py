"""Benchmark: the tokenize stage's encoder (Spark `mapInArrow`, `jobs.tokens.encode_arrow`) against bare
SentencePiece on the same documents, in the same run.  Goal: Spark >= 0.8x bare.

    .venv/bin/python bench/tokenize_throughput.py [REPEAT] [VOCAB]

Documents: the shared English Wikipedia excerpt and the two Gutenberg books (../shared/data/text), cut into
documents of ~40 lines, the whole set repeated REPEAT times (default 6) with distinct doc_ids.  A BPE model
of VOCAB pieces (default 8192) is trained with the stage's own settings on the first copy (not timed).
  bare:  one process, `sp.encode(batch)` per batch of `tokenize.batch_rows` texts, from a Python list;
  spark: local[2] (all cores, as bare SentencePiece uses all cores), parquet -> `mapInArrow(encode_arrow)`
         -> the `noop` sink, so the figure is reading + encoding + Arrow hand-over, without the Delta write.
Each timed three times after one warm-up; medians.  Prints one JSON line.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TEXT = ROOT.parent / "shared" / "data" / "text"


def documents(lines_per_doc: int = 40) -> list[str]:
    texts = [json.loads(line)["text"] for line in
             (TEXT / "wiki_text" / "enwiki_dump_excerpt" / "articles.plain.jsonl").read_text().splitlines()]
    texts += [(TEXT / "gutenberg_text" / name).read_text(errors="replace")
              for name in ("botchan.txt", "tinyshakespeare_input.txt")]
    docs = []
    for text in texts:
        lines = text.splitlines()
        docs += ["\n".join(lines[i:i + lines_per_doc]) for i in range(0, len(lines), lines_per_doc)]
    return [d for d in docs if d.strip()]


def timed(fn, runs: int = 3) -> float:
    fn()  # warm-up: JVM, Python workers, model load
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(repeat: int = 6, vocab: int = 8192) -> dict:
    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config
    from jobs.text import bpe
    from jobs.tokens import encode_arrow, gold_schema

    cfg = load_jobs_config([f"tokenize.vocab_size={vocab}", "spark.shuffle_partitions=2"])
    base = documents()
    model = bpe.train_bpe(base, cfg.tokenize)
    digest = bpe.sha256_hex(model)
    sp = bpe.processor(model, digest)
    texts = base * repeat
    rows = cfg.tokenize.batch_rows
    batches = [texts[i:i + rows] for i in range(0, len(texts), rows)]
    n_tokens = sum(len(ids) for batch in batches for ids in sp.encode(batch))
    bare_s = timed(lambda: [sp.encode(batch) for batch in batches])

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark, _ = build_session(cfg, load_paths(), "local[2]", "weblm-bench-tokenize")
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(rows))
    try:
        with tempfile.TemporaryDirectory(prefix="weblm-bench-") as tmp:
            data = [(f"doc-{i:07d}", f"http://bench.weblm.test/{i}", "web", "en", t, "h") for i, t in enumerate(texts)]
            (spark.createDataFrame(data, "doc_id string, url string, source string, language string, text string, "
                                         "content_sha256 string")
             .repartition(2).write.parquet(f"{tmp}/docs"))
            docs = spark.read.parquet(f"{tmp}/docs")
            encoded = docs.mapInArrow(lambda it: encode_arrow(it, model, digest), gold_schema())
            assert encoded.agg({"n_tokens": "sum"}).first()[0] == n_tokens  # the same tokens as bare
            spark_s = timed(lambda: encoded.write.format("noop").mode("overwrite").save())
    finally:
        spark.stop()
    chars = sum(map(len, texts))
    result = {"bench": "tokenize_throughput", "documents": len(texts), "chars": chars, "tokens": n_tokens,
              "vocab_size": sp.get_piece_size(), "batch_rows": rows, "cores": os.cpu_count(),
              "bare_s": round(bare_s, 3), "spark_s": round(spark_s, 3),
              "bare_tokens_per_s": round(n_tokens / bare_s), "spark_tokens_per_s": round(n_tokens / spark_s),
              "ratio": round(bare_s / spark_s, 3), "goal": 0.8}
    result["meets_goal"] = result["ratio"] >= result["goal"]
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
