"""`gold.tokens` -> Megatron indexed shards + `manifest.json` (SEAMS §4).

    python -m jobs.export [--lake DIR] [-p shards_dir=DIR] [-o export.target_tokens_per_shard=1000000]
    spark-submit jobs/export.py ...

Documents in doc_id order, cut into contiguous shards of about `target_tokens_per_shard` tokens.
Each shard is written by one task (megatron-core's `IndexedDatasetBuilder`) into a staging
folder; the driver moves the shards in and writes the manifest last, atomically.  Everything is a
function of the gold table version (its commit time is the manifest's `created`), so a rerun on
the same table writes identical bytes.
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/<stage>.py` puts jobs/ first on sys.path, where jobs/tokenize.py would shadow
    # the standard library's `tokenize` (imported by linecache, hence by logging and tracebacks)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import json
import logging
import shutil
from datetime import timezone
from pathlib import Path

from jobs.base import SparkJob, commit_info, table_version
from jobs.shard_writer import file_sha256, plan_shards, token_dtype, write_shard
from jobs.text import bpe

log = logging.getLogger("weblm.jobs.export")

FORMAT = "megatron-indexed/1"
MANIFEST = "manifest.json"


def canonical_sha256(manifest: dict) -> str:
    """SHA-256 of the manifest without its `sha256` field, as canonical JSON (sort_keys, compact, UTF-8)."""
    import hashlib

    body = {k: v for k, v in manifest.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_partition(index, rows, folder, dtype, eod_id):
    """One task = one shard: rows arrive sorted by (shard, i)."""
    docs = ((key[1], doc_id, url, tokens) for key, (doc_id, url, tokens) in rows)
    yield write_shard(folder, index, docs, dtype, eod_id)


class ExportJob(SparkJob):
    name = "export"
    description = "gold.tokens -> Megatron indexed shards + manifest.json"

    def tokenizer_entry(self, digest: str) -> tuple[dict, bytes]:
        prefix_len = self.cfg.tokenize.hash_prefix_len
        model_path = f"{self.paths.tokenizer_dir.rstrip('/')}/{digest[:prefix_len]}/{bpe.MODEL_FILE}"
        local = Path(model_path)
        if not local.is_file():
            raise FileNotFoundError(f"gold.tokens was made with tokenizer {digest[:12]}…, but {local} is missing; "
                                    "rerun jobs.tokenize or restore the model")
        model = local.read_bytes()
        if bpe.sha256_hex(model) != digest:
            raise ValueError(f"{local} has sha256 {bpe.sha256_hex(model)[:12]}…, gold.tokens says {digest[:12]}…")
        info = bpe.model_info(model)
        return {"type": "sentencepiece-bpe", "model": model_path, "sha256": digest,
                "vocab_size": info["vocab_size"], "eod_id": info["eod_id"], "pad_id": info["pad_id"]}, model

    def run_job(self, spark, args):
        from pyspark.sql import functions as F

        cfg = self.cfg.export
        gold_path = self.table("gold.tokens")
        version = table_version(spark, gold_path)
        if version is None:
            raise FileNotFoundError(f"no gold.tokens table at {gold_path}; run jobs.tokenize first")
        sources = {"gold.tokens": {"path": self.paths.table("gold.tokens"), "version": version}}
        for name in ("silver.documents", "bronze.pages"):
            sources[name] = {"path": self.paths.table(name), "version": table_version(spark, self.table(name))}
        gold = spark.read.format("delta").option("versionAsOf", version).load(gold_path)
        digests = [r[0] for r in gold.select("tokenizer_sha256").distinct().collect()]
        if len(digests) != 1:
            raise ValueError(f"gold.tokens v{version} mixes {len(digests)} tokenizers {digests}; rerun jobs.tokenize")
        tokenizer, _ = self.tokenizer_entry(digests[0])
        dtype = token_dtype(tokenizer["vocab_size"])

        order = gold.select("doc_id", "n_tokens").orderBy("doc_id").collect()
        ranges = plan_shards([r.n_tokens for r in order], cfg.target_tokens_per_shard, cfg.max_shards)
        placement = [(order[i].doc_id, shard, i - start)
                     for shard, (start, end) in enumerate(ranges) for i in range(start, end)]
        placed = spark.createDataFrame(placement, "doc_id string, shard int, i int")
        shards_dir = Path(self.paths.shards_dir)
        staging = shards_dir / cfg.staging_dir / f"v{version}-{digests[0][:12]}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        written = []
        if ranges:
            keyed = (gold.join(placed, "doc_id").select("shard", "i", "doc_id", "url", "tokens").rdd
                     .map(lambda r: ((r.shard, r.i), (r.doc_id, r.url, r.tokens)))
                     .repartitionAndSortWithinPartitions(len(ranges), partitionFunc=lambda key: key[0]))
            folder, eod = str(staging), tokenizer["eod_id"]
            written = sorted(keyed.mapPartitionsWithIndex(
                lambda index, rows: _write_partition(index, rows, folder, dtype, eod)).collect(),
                key=lambda s: s["index"])
        self.publish(shards_dir, staging, written, sources, tokenizer, dtype, version, gold_path, spark)
        self.metrics.input_rows = len(order)
        self.metrics.output_rows = sum(s["documents"] for s in written)

    def publish(self, shards_dir, staging, written, sources, tokenizer, dtype, version, gold_path, spark):
        """Move staged shards in, drop stale ones, write the manifest last (temp + rename)."""
        import numpy as np

        manifest_path = shards_dir / MANIFEST
        manifest_path.unlink(missing_ok=True)  # no manifest may point at half-replaced shards
        keep = set()
        for shard in written:
            for suffix in (".bin", ".idx", ".docs.jsonl"):
                os.replace(staging / (shard["prefix"] + suffix), shards_dir / (shard["prefix"] + suffix))
                keep.add(shard["prefix"] + suffix)
        for stale in shards_dir.glob("shard-*"):
            if stale.name not in keep:
                stale.unlink()
        shutil.rmtree(staging, ignore_errors=True)
        if not any(staging.parent.iterdir()):
            staging.parent.rmdir()
        for shard in written:  # the files that arrived are the files that were hashed
            assert file_sha256(str(shards_dir / (shard["prefix"] + ".bin"))) == shard["bin_sha256"]
        committed = commit_info(spark, gold_path, version)["timestamp"]
        shards = [{k: s[k] for k in ("prefix", "documents", "tokens", "bin_sha256", "idx_sha256", "docs")}
                  for s in written]
        manifest = {
            "format": FORMAT,
            "created": committed.replace(tzinfo=committed.tzinfo or timezone.utc).isoformat(),
            "sources": sources, "tokenizer": tokenizer, "dtype": np.dtype(dtype).name, "shards": shards,
            "totals": {"documents": sum(s["documents"] for s in shards), "tokens": sum(s["tokens"] for s in shards)},
        }
        manifest["sha256"] = canonical_sha256(manifest)
        tmp = manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, manifest_path)
        log.info("export: %d shards, %d documents, %d tokens (%s) -> %s", len(shards),
                 manifest["totals"]["documents"], manifest["totals"]["tokens"], manifest["dtype"], manifest_path)
        self.metrics.extra.update(manifest=str(manifest_path), manifest_sha256=manifest["sha256"], shards=len(shards),
                                  tokens=manifest["totals"]["tokens"], dtype=manifest["dtype"], sources=sources)


if __name__ == "__main__":
    ExportJob().run()
