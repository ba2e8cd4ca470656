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
import tempfile
from dataclasses import asdict
from datetime import timezone

import storage
from jobs.base import SparkJob, commit_info, settings_sha256, table_version
from jobs.shard_writer import plan_shards, token_dtype, write_shard
from jobs.text import bpe

log = logging.getLogger("weblm.jobs.export")

FORMAT = "megatron-indexed/1"
MANIFEST = "manifest.json"
SHARD_FILES = (".bin", ".idx", ".docs.jsonl")


def canonical_sha256(manifest: dict) -> str:
    """SHA-256 of the manifest without its `sha256` field, as canonical JSON (sort_keys, compact, UTF-8)."""
    import hashlib

    body = {k: v for k, v in manifest.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_partition(index, rows, folder, dtype, eod_id):
    """One task = one shard: rows arrive sorted by (shard, i).

    megatron-core's builder writes local files, so for a URI the shard is built in a local temp folder
    on the executor and uploaded (size-checked) into the staging folder.
    """
    docs = ((key[1], doc_id, url, tokens) for key, (doc_id, url, tokens) in rows)
    if not storage.is_uri(folder):
        yield write_shard(folder, index, docs, dtype, eod_id)
        return
    with tempfile.TemporaryDirectory(prefix="weblm-shard-") as local:
        shard = write_shard(local, index, docs, dtype, eod_id)
        for suffix in SHARD_FILES:
            name = shard["prefix"] + suffix
            storage.put_file(f"{local}/{name}", storage.join(folder, name))
    yield shard


class ExportJob(SparkJob):
    name = "export"
    description = "gold.tokens -> Megatron indexed shards + manifest.json"

    def tokenizer_entry(self, digest: str) -> dict:
        model_path, model = bpe.load_model(self.paths.tokenizer_dir, digest, self.cfg.tokenize.hash_prefix_len)
        info = bpe.model_info(model)
        return {"type": "sentencepiece-bpe", "model": model_path, "sha256": digest,
                "vocab_size": info["vocab_size"], "eod_id": info["eod_id"], "pad_id": info["pad_id"]}

    def up_to_date(self, version: int, config_sha: str) -> bool:
        """The manifest already describes this gold version under these settings, and its shards are there."""
        manifest_path = storage.join(self.paths.shards_dir, MANIFEST)
        if not storage.exists(manifest_path):
            return False
        try:
            manifest = json.loads(storage.read_text(manifest_path))
        except ValueError:
            return False
        gold = manifest.get("sources", {}).get("gold.tokens", {})
        return (gold.get("path") == self.paths.table("gold.tokens") and gold.get("version") == version
                and manifest.get("config_sha256") == config_sha
                and all(storage.exists(storage.join(self.paths.shards_dir, s["prefix"] + suffix))
                        for s in manifest.get("shards", []) for suffix in SHARD_FILES))

    def run_job(self, spark, args):
        cfg = self.cfg.export
        gold_path = self.table("gold.tokens")
        version = table_version(spark, gold_path)
        if version is None:
            raise FileNotFoundError(f"no gold.tokens table at {gold_path}; run jobs.tokenize first")
        config_sha = settings_sha256({k: v for k, v in asdict(cfg).items() if k != "staging_dir"})
        self.metrics.extra.update(mode="full" if args.full else "incremental", gold_version=version)
        if not args.full and self.up_to_date(version, config_sha):
            log.info("export: the manifest already describes gold.tokens v%d; nothing new, no file written", version)
            return
        sources = {"gold.tokens": {"path": self.paths.table("gold.tokens"), "version": version}}
        for name in ("silver.documents", "bronze.pages"):
            sources[name] = {"path": self.paths.table(name), "version": table_version(spark, self.table(name))}
        gold = spark.read.format("delta").option("versionAsOf", version).load(gold_path)
        digests = [r[0] for r in gold.select("tokenizer_sha256").distinct().collect()]
        if not digests:
            raise ValueError(f"gold.tokens v{version} has no documents: every document was filtered out "
                             "upstream; check the extract settings and the jobs' metrics")
        if len(digests) != 1:
            raise ValueError(f"gold.tokens v{version} mixes {len(digests)} tokenizers {digests}; "
                             "rerun jobs.tokenize --full")
        tokenizer = self.tokenizer_entry(digests[0])
        dtype = token_dtype(tokenizer["vocab_size"])

        order = gold.select("doc_id", "n_tokens").orderBy("doc_id").collect()
        ranges = plan_shards([r.n_tokens for r in order], cfg.target_tokens_per_shard, cfg.max_shards)
        placement = [(order[i].doc_id, shard, i - start)
                     for shard, (start, end) in enumerate(ranges) for i in range(start, end)]
        placed = spark.createDataFrame(placement, "doc_id string, shard int, i int")
        shards_dir = self.paths.shards_dir
        staging = storage.join(shards_dir, cfg.staging_dir, f"v{version}-{digests[0][:12]}")
        storage.remove(staging, recursive=True)
        storage.makedirs(staging)
        written = []
        if ranges:
            keyed = (gold.join(placed, "doc_id").select("shard", "i", "doc_id", "url", "tokens").rdd
                     .map(lambda r: ((r.shard, r.i), (r.doc_id, r.url, r.tokens)))
                     .repartitionAndSortWithinPartitions(len(ranges), partitionFunc=lambda key: key[0]))
            eod = tokenizer["eod_id"]
            written = sorted(keyed.mapPartitionsWithIndex(
                lambda index, rows: _write_partition(index, rows, staging, dtype, eod)).collect(),
                key=lambda s: s["index"])
        self.publish(shards_dir, staging, written, sources, tokenizer, dtype, version, gold_path, spark, config_sha)
        self.metrics.input_rows = len(order)
        self.metrics.output_rows = sum(s["documents"] for s in written)

    def publish(self, shards_dir, staging, written, sources, tokenizer, dtype, version, gold_path, spark, config_sha):
        """Move staged shards in, drop stale ones, write the manifest last (all-or-nothing)."""
        import numpy as np

        manifest_path = storage.join(shards_dir, MANIFEST)
        storage.remove(manifest_path)  # no manifest may point at half-replaced shards
        keep = set()
        for shard in written:
            for suffix in SHARD_FILES:
                name = shard["prefix"] + suffix
                storage.move(storage.join(staging, name), storage.join(shards_dir, name))
                keep.add(name)
        for entry in storage.listdir(shards_dir):
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if name.startswith("shard-") and name not in keep:
                storage.remove(entry)
        storage.remove(storage.join(shards_dir, self.cfg.export.staging_dir), recursive=True)
        for shard in written:  # the files that arrived are the files that were hashed
            arrived = storage.sha256(storage.join(shards_dir, shard["prefix"] + ".bin"))
            if arrived != shard["bin_sha256"]:
                raise OSError(f"{shard['prefix']}.bin in {shards_dir} has sha256 {arrived[:12]}…, the writer "
                              f"hashed {shard['bin_sha256'][:12]}…; no manifest written, rerun jobs.export")
        committed = commit_info(spark, gold_path, version)["timestamp"]
        shards = [{k: s[k] for k in ("prefix", "documents", "tokens", "bin_sha256", "idx_sha256", "docs")}
                  for s in written]
        manifest = {
            "format": FORMAT,
            "created": committed.replace(tzinfo=committed.tzinfo or timezone.utc).isoformat(),
            "sources": sources, "tokenizer": tokenizer, "dtype": np.dtype(dtype).name, "shards": shards,
            "totals": {"documents": sum(s["documents"] for s in shards), "tokens": sum(s["tokens"] for s in shards)},
            "config_sha256": config_sha,
        }
        manifest["sha256"] = canonical_sha256(manifest)
        storage.write_text(manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        log.info("export: %d shards, %d documents, %d tokens (%s) -> %s", len(shards),
                 manifest["totals"]["documents"], manifest["totals"]["tokens"], manifest["dtype"], manifest_path)
        self.metrics.extra.update(manifest=manifest_path, manifest_sha256=manifest["sha256"], shards=len(shards),
                                  tokens=manifest["totals"]["tokens"], dtype=manifest["dtype"], sources=sources)


if __name__ == "__main__":
    ExportJob().run()
