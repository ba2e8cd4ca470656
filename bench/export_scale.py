"""Benchmark: the export stage on a synthetic gold.tokens table, on one local Spark session.

    .venv/bin/python bench/export_scale.py [DOCUMENTS] [MEAN_TOKENS] [TOKENS_PER_SHARD]

Builds gold.tokens with DOCUMENTS rows (default 200,000) of random token ids (lengths uniform in
[1, 2 * MEAN_TOKENS], default mean 300) for a real 8k SentencePiece model, then runs `jobs.export` (natural
mix, default 2,000,000 tokens per shard) and reads every shard back with megatron-core's IndexedDataset to
check the totals.  Prints one JSON line: rows, tokens, shards, seconds, tokens/s.  The point is the shape
of the work (no per-document collect to the driver, shards written and checked by the executors); on a
laptop's two cores the figure is a floor, not a cluster's rate.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(documents: int = 200_000, mean_tokens: int = 300, tokens_per_shard: int = 2_000_000) -> dict:
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from pyspark.sql import functions as F

    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config
    from jobs.export import ExportJob
    from jobs.text import bpe

    cfg = load_jobs_config(["tokenize.vocab_size=8192", "spark.shuffle_partitions=8"])
    texts = [f"document {i}: otters, beavers and herons share the river bank {i * 7} times." for i in range(5000)]
    model = bpe.train_bpe(texts, cfg.tokenize)
    vocab = bpe.model_info(model)["vocab_size"]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="weblm-bench-export-") as tmp:
        tokenizer_dir, lake, shards = f"{tmp}/tokenizer", f"{tmp}/lake", f"{tmp}/shards"
        bpe.save_model(model, tokenizer_dir, cfg.tokenize.hash_prefix_len)
        spark, _ = build_session(cfg, load_paths([f"var={tmp}"]), "local[2]", "weblm-bench-export")
        spark.sparkContext.setLogLevel("ERROR")
        n = F.floor(F.rand(seed=1) * (2 * mean_tokens)).cast("int") + 1
        gold = (spark.range(documents, numPartitions=8)
                .select(F.sha1(F.col("id").cast("string")).alias("doc_id"),
                        F.concat(F.lit("http://bench.weblm.test/"), F.col("id")).alias("url"), n.alias("n"))
                .select("doc_id", "url", F.lit("web").alias("source"), F.lit("en").alias("language"),
                        F.expr(f"transform(sequence(1, n), k -> cast(3 + pmod(hash(doc_id, k), {vocab - 3}) as int))")
                        .alias("tokens"), F.col("n").alias("n_tokens"),
                        F.lit(bpe.sha256_hex(model)).alias("tokenizer_sha256"), F.lit("x").alias("text_sha256")))
        gold.write.format("delta").save(f"{lake}/gold/tokens")
        tokens = spark.read.format("delta").load(f"{lake}/gold/tokens").agg(F.sum("n_tokens")).first()[0]
        start = time.perf_counter()
        metrics = ExportJob().run(["--lake", lake, "-p", f"tokenizer_dir={tokenizer_dir}", "-p", f"shards_dir={shards}",
                                   "-o", f"export.target_tokens_per_shard={tokens_per_shard}",
                                   "-o", "spark.stop_session=false"])
        seconds = time.perf_counter() - start
        manifest = json.loads(Path(shards, "manifest.json").read_text())
        read_back = 0
        for shard in manifest["shards"]:
            indexed = IndexedDataset(f"{shards}/{shard['prefix']}")  # held: its lengths are a view of its mmap
            read_back += int(indexed.sequence_lengths.sum())
            del indexed
        spark.stop()
    assert read_back == manifest["totals"]["tokens"] == tokens + documents
    result = {"bench": "export_scale", "documents": documents, "tokens_with_eod": read_back,
              "shards": len(manifest["shards"]), "dtype": manifest["dtype"], "seconds": round(seconds, 2),
              "tokens_per_s": round(read_back / seconds), "documents_per_s": round(documents / seconds),
              "order_buckets": metrics.extra["order_buckets"], "cores": os.cpu_count()}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
