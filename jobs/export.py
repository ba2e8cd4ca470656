"""`gold.tokens` -> Megatron indexed shards + `manifest.json` + `gold.shard_lineage` (SEAMS §4).

    python -m jobs.export [--lake DIR] [-p shards_dir=DIR] [-o export.target_tokens_per_shard=1000000]
    spark-submit jobs/export.py ...

1. Tag each document with its source (URL rules) and sample the configured mix: a document gets
   0, 1 or more copies, decided by a hash of (seed, doc_id) (`jobs.mixing`).
2. Order every copy by xxhash64(shuffle_seed, doc_id, copy): a seeded global shuffle.  The key space is
   cut into `order_buckets` ranges; per-bucket document and token sums (a few rows) go to the driver,
   whose prefix sums give each bucket its global offsets, and a window inside each bucket gives every
   copy its global token start.  A copy belongs to the shard whose window of `target_tokens_per_shard`
   tokens holds its first token.  Nothing per document ever reaches the driver.
3. Executors write the shards in parallel (megatron-core's `IndexedDatasetBuilder`, `jobs.shard_writer`)
   into a staging folder, each named by its content hash, then check them in parallel (checksums,
   counts, ids < vocabulary, EOD at every document's end); the driver compares the counts with gold's.
   Any failure stops here: no manifest, and the message says what and where.
4. The driver moves the shards in, writes the lineage table, then the manifest, last and atomically,
   and removes shards no manifest names.  Everything is a function of the gold version and the export
   settings (the manifest's `created` is gold's commit time), so a rerun writes identical bytes.
"""
import json
import logging
import sys
from dataclasses import asdict
from datetime import timezone

import storage
from jobs import mixing
from jobs.base import SparkJob, commit_info, data_changed_since, local_frame, settings_sha256, table_version
from jobs.shard_writer import SHARD_FILES, shard_window, token_dtype, validate_shard, write_shards
from jobs.text import bpe

log = logging.getLogger("weblm.jobs.export")

FORMAT = "megatron-indexed/1"
MANIFEST = "manifest.json"
MIX_APPLIED_BY = "export"  # SEAMS §4: the shards hold the sampled mix; the trainer blends shards by size only
STAGE_STRIDE = 2 ** 40     # raw shard numbers of stage k start at k * STAGE_STRIDE: no shard spans two stages


class ExportValidationError(RuntimeError):
    """Shards that must not be trained on; no manifest was written."""


def canonical_sha256(manifest: dict) -> str:
    """SHA-256 of the manifest without its `sha256` field, as canonical JSON (sort_keys, compact, UTF-8)."""
    import hashlib

    body = {k: v for k, v in manifest.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shard_result_schema():
    from pyspark.sql import types as T

    return T.StructType([T.StructField(name, kind) for name, kind in (
        ("index", T.IntegerType()), ("prefix", T.StringType()), ("documents", T.LongType()),
        ("tokens", T.LongType()), ("bin_sha256", T.StringType()), ("idx_sha256", T.StringType()),
        ("docs_sha256", T.StringType()), ("docs", T.StringType()), ("bad_ids", T.LongType()))])


def _write_partition(batches, folder, dtype, eod_id, vocab_size):
    """`mapInArrow` body: the partition's rows, sorted by (shard, i) -> one result row per shard written."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(shard_result_schema())
    for shard in write_shards(batches, folder, dtype, eod_id, vocab_size):
        yield pa.RecordBatch.from_pylist([{k: shard[k] for k in schema.names}], schema=schema)


class ExportJob(SparkJob):
    name = "export"
    description = "gold.tokens -> Megatron indexed shards + manifest.json + gold.shard_lineage"

    def tokenizer_entry(self, digest: str) -> dict:
        model_path, model = bpe.load_model(self.paths.tokenizer_dir, digest, self.cfg.tokenize.hash_prefix_len)
        info = bpe.model_info(model)
        return {"type": "sentencepiece-bpe", "model": model_path, "sha256": digest,
                "vocab_size": info["vocab_size"], "eod_id": info["eod_id"], "pad_id": info["pad_id"]}

    def up_to_date(self, spark, version: int, config_sha: str) -> bool:
        """The manifest already describes this gold version (or an earlier one with the same rows: maintenance
        commits since) under these settings, and its shards are there."""
        manifest_path = storage.join(self.paths.shards_dir, MANIFEST)
        if not storage.exists(manifest_path):
            return False
        try:
            manifest = json.loads(storage.read_text(manifest_path))
        except ValueError:
            log.warning("export: %s is not JSON; exporting again", manifest_path)
            return False
        gold = manifest.get("sources", {}).get("gold.tokens", {})
        stale = [why for why, holds in (
            (f"it names gold.tokens {gold.get('path')} v{gold.get('version')}",
             gold.get("path") == self.paths.table("gold.tokens")
             and self.same_rows(spark, gold.get("version"), version)),
            ("the export settings changed", manifest.get("config_sha256") == config_sha),
            ("some of its shard files are missing",
             all(storage.exists(storage.join(self.paths.shards_dir, s["prefix"] + suffix))
                 for s in manifest.get("shards", []) for suffix in SHARD_FILES))) if not holds]
        if stale:
            log.info("export: the manifest is stale (%s); exporting gold.tokens v%d", "; ".join(stale), version)
        return not stale

    def same_rows(self, spark, named, version: int) -> bool:
        if named == version:
            return True
        return (isinstance(named, int) and named < version
                and not data_changed_since(spark, self.table("gold.tokens"), named))

    def run_job(self, spark, args):
        cfg = self.cfg.export
        gold_path = self.table("gold.tokens")
        version = table_version(spark, gold_path)
        if version is None:
            raise FileNotFoundError(f"no gold.tokens table at {gold_path}; run the tokenize stage (jobs.tokens) first")
        config_sha = settings_sha256({k: v for k, v in asdict(cfg).items() if k != "staging_dir"})
        self.metrics.extra.update(mode="full" if args.full else "incremental", gold_version=version)
        if not args.full and self.up_to_date(spark, version, config_sha):
            log.info("export: the manifest already describes gold.tokens v%d; nothing new, no file written", version)
            return
        sources = {"gold.tokens": {"path": self.paths.table("gold.tokens"), "version": version}}
        for name in ("silver.documents", "bronze.pages"):
            sources[name] = {"path": self.paths.table(name), "version": table_version(spark, self.table(name))}
        gold = spark.read.format("delta").option("versionAsOf", version).load(gold_path)
        digests = [r[0] for r in gold.select("tokenizer_sha256").distinct().limit(2).collect()]
        if not digests:
            raise ValueError(f"gold.tokens v{version} has no documents: every document was filtered out "
                             "upstream; check the extract settings and the jobs' metrics")
        if len(digests) != 1:
            raise ValueError(f"gold.tokens v{version} mixes tokenizers ({', '.join(d[:12] for d in digests)}, ...); "
                             "rerun the tokenize stage with --full")
        tokenizer = self.tokenizer_entry(digests[0])
        dtype = token_dtype(tokenizer["vocab_size"])

        plan = self.plan(spark, gold)
        try:
            self.metrics.input_rows = plan["input_documents"]
            shards_dir = self.paths.shards_dir
            staging = storage.join(shards_dir, cfg.staging_dir, f"v{version}-{config_sha[:12]}")
            storage.remove(staging, recursive=True)
            storage.makedirs(staging)
            written = self.write(plan["placed"], gold, plan["shards"], staging, tokenizer, dtype)
            self.validate(spark, staging, written, plan, tokenizer, dtype)
            lineage = self.write_lineage(spark, plan["placed"], written, sources)
            self.publish(shards_dir, staging, written, sources, tokenizer, dtype, version, gold_path, spark,
                         config_sha, plan, lineage)
        finally:
            plan["located"].unpersist()
        self.metrics.output_rows = sum(s["documents"] for s in written)

    def write(self, placed, gold, shards: int, staging: str, tokenizer: dict, dtype) -> list[dict]:
        """Each shard's rows in one partition, in order; the executors write them (`jobs.shard_writer`)."""
        rows = (placed.select("shard", "i", "doc_id", "url", "source", "copy")
                .join(gold.select("doc_id", "tokens"), "doc_id")
                .repartitionByRange(max(1, shards), "shard").sortWithinPartitions("shard", "i")
                .select("shard", "i", "doc_id", "url", "source", "copy", "tokens"))
        eod, vocab = tokenizer["eod_id"], tokenizer["vocab_size"]
        results = rows.mapInArrow(lambda batches: _write_partition(batches, staging, dtype, eod, vocab),
                                  shard_result_schema()).collect()
        return sorted((r.asDict() for r in results), key=lambda s: s["index"])

    def plan(self, spark, gold) -> dict:
        """Sample the mix (stage by stage), shuffle, and place every copy in a shard, from per-bucket sums only.

        One stage ("main") for a plain mix; a schedule (`export.mix.schedules`) gives each stage its own
        sample, by its own hash, of its share of the tokens, its own shuffle and its own shards, in order.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cfg = self.cfg.export
        stages = mixing.mix_stages(cfg.mix)
        scheduled = cfg.mix.name in cfg.mix.schedules
        if "source" not in gold.columns:
            raise ValueError("gold.tokens has no source column (it was made before documents were tagged); "
                             "rerun the tokenize stage (python -m jobs.tokens), which adds it without re-encoding")
        docs = gold.select("doc_id", "url", "n_tokens", "source")
        counts = docs.groupBy("source").agg(
            F.count(F.lit(1)).alias("docs"), F.sum(F.col("n_tokens") + 1).alias("tokens"),
            F.sum(F.when(F.col("n_tokens") == 0, 1).otherwise(0)).alias("empty")).collect()
        per_source = {r["source"]: (int(r["docs"]), int(r["tokens"]), int(r["empty"])) for r in counts}
        empty = sum(e for _, _, e in per_source.values())
        if empty:  # nothing to learn from a lone EOD; counted, not exported
            self.metrics.skip("empty_document", empty)
        in_tokens = {s: t - e for s, (_, t, e) in per_source.items()}
        total = cfg.mix.total_tokens or sum(in_tokens.values())
        rate_rows = []
        for k, stage in enumerate(stages):
            weights = stage["weights"] or ({s: t for s, t in in_tokens.items() if t} if scheduled else {})
            stage["rates"] = mixing.sampling_rates(in_tokens, weights, round(stage["share"] * total) if scheduled
                                                   else cfg.mix.total_tokens)
            rate_rows += [(k, stage["stage"], source, float(r)) for source, r in stage["rates"].items()]
        rates = local_frame(spark, rate_rows or [(-1, "", "", 0.0)],
                            "stage_index int, stage string, source string, rate double")
        buckets = max(1, cfg.order_buckets)
        # a plain mix keeps its hashes free of the stage, so its sample and order do not depend on stage names
        salt = [F.col("stage")] if scheduled else []
        sampled = (docs.where(F.col("n_tokens") > 0).join(F.broadcast(rates), "source")
                   .withColumn("copies", mixing.copies_column(
                       F.col("rate"), mixing.unit_hash(cfg.mix.seed, *salt, F.col("doc_id"))))
                   .where(F.col("copies") > 0)
                   .withColumn("copy", F.explode(F.sequence(F.lit(0), F.col("copies") - 1)))
                   .withColumn("length", (F.col("n_tokens") + 1).cast("long"))
                   .withColumn("key", F.xxhash64(F.lit(int(cfg.shuffle_seed)), *salt, F.col("doc_id"), F.col("copy")))
                   .withColumn("bucket", (F.col("stage_index") * buckets + F.least(
                       F.floor((F.col("key").cast("double") / float(2 ** 64) + 0.5) * buckets),
                       F.lit(buckets - 1))).cast("int")))
        sums = sorted((int(r["bucket"]), int(r["docs"]), int(r["tokens"])) for r in sampled.groupBy("bucket").agg(
            F.count(F.lit(1)).alias("docs"), F.sum("length").alias("tokens")).collect())
        offsets, doc_base, token_base, stage_base = [], 0, 0, {}
        for bucket, n_docs, n_tokens in sums:  # prefix sums: where each bucket starts, in documents and tokens
            stage_base.setdefault(bucket // buckets, token_base)   # a stage's shards start at its first token
            offsets.append((bucket, doc_base, token_base, stage_base[bucket // buckets]))
            doc_base, token_base = doc_base + n_docs, token_base + n_tokens
        window = shard_window(token_base, cfg.target_tokens_per_shard, cfg.max_shards)
        in_bucket = Window.partitionBy("bucket").orderBy("key", "doc_id", "copy")
        starts = local_frame(spark, offsets or [(0, 0, 0, 0)],
                             "bucket int, doc_base long, token_base long, stage_base long")
        located = (sampled.join(F.broadcast(starts), "bucket")
                   .withColumn("ordinal", F.col("doc_base") + F.row_number().over(in_bucket) - 1)
                   .withColumn("start", F.col("token_base") + F.sum("length").over(in_bucket) - F.col("length"))
                   .withColumn("raw_shard", F.col("stage_index").cast("long") * STAGE_STRIDE
                               + F.floor((F.col("start") - F.col("stage_base")) / F.lit(window)).cast("long"))
                   .select("doc_id", "url", "source", "stage", "copy", "length", "ordinal", "raw_shard")).persist()
        stats = sorted((int(r["raw_shard"]), int(r["first"]), int(r["docs"]), int(r["tokens"]))
                       for r in located.groupBy("raw_shard").agg(
                           F.min("ordinal").alias("first"), F.count(F.lit(1)).alias("docs"),
                           F.sum("length").alias("tokens")).collect())
        shard_rows = [(raw, index, first) for index, (raw, first, _, _) in enumerate(stats)]
        dense = local_frame(spark, shard_rows or [(-1, -1, 0)], "raw_shard long, shard int, first long")
        placed = (located.join(F.broadcast(dense), "raw_shard")
                  .withColumn("i", (F.col("ordinal") - F.col("first")).cast("long"))
                  .select("shard", "i", "doc_id", "url", "source", "stage", "copy", "length"))
        out_tokens = {}
        for r in located.groupBy("stage", "source").agg(F.sum("length").alias("tokens")).collect():
            out_tokens.setdefault(r["stage"], {})[r["source"]] = int(r["tokens"])
        mix_stages = []
        for k, stage in enumerate(stages):
            shards = [index for index, (raw, _, _, _) in enumerate(stats) if raw // STAGE_STRIDE == k]
            mix_stages.append({
                "stage": stage["stage"], "mix": stage["mix"], "share": round(stage["share"], 6),
                "weights": stage["weights"], "rates": {s: round(r, 6) for s, r in sorted(stage["rates"].items())},
                "realized": mixing.realized_mix(out_tokens.get(stage["stage"], {}), stage["weights"], in_tokens),
                "tokens": sum(out_tokens.get(stage["stage"], {}).values()), "shards": shards})
        mix = {"name": cfg.mix.name, "applied_by": MIX_APPLIED_BY, "seed": cfg.mix.seed, "stages": mix_stages}
        if not scheduled:  # a plain mix: its one stage's figures at the top, as SEAMS §4 shows them
            mix.update({k: mix_stages[0][k] for k in ("weights", "rates", "realized")})
        self.metrics.extra.update(mix=mix, order_buckets=buckets, shard_window_tokens=window)
        for stage in mix_stages:
            for source, row in stage["realized"].items():
                log.info("export: mix %s, stage %s, source %s: %d -> %d tokens, share %.3f (target %s)",
                         cfg.mix.name, stage["stage"], source, row["input_tokens"], row["tokens"], row["share"],
                         row["target_share"])
            if not stage["shards"]:
                log.warning("export: stage %s of mix %s samples no document", stage["stage"], cfg.mix.name)
        if not stats:
            located.unpersist()
            raise ValueError(f"nothing to export from gold.tokens: {empty} empty documents, and the mix "
                             f"{cfg.mix.name!r} {[s['weights'] or '(natural)' for s in stages]} keeps no other; "
                             "check export.mix")
        return {"placed": placed, "located": located, "shards": len(stats), "window": window, "mix": mix,
                "expected": {index: (docs, tokens) for index, (_, _, docs, tokens) in enumerate(stats)},
                "input_documents": sum(d for d, _, _ in per_source.values()),
                "gold_tokens": sum(in_tokens.values()), "out_tokens": token_base, "out_documents": doc_base,
                "natural": not scheduled and not stages[0]["weights"]}

    def validate(self, spark, staging, written, plan, tokenizer, dtype) -> None:
        """Every check before a manifest may exist; all problems at once, then stop."""
        vocab, eod = tokenizer["vocab_size"], tokenizer["eod_id"]
        problems = []
        if written:
            entries = spark.sparkContext.parallelize(written, len(written))
            problems += entries.flatMap(lambda e: validate_shard(staging, e, vocab, eod, dtype)).collect()
        expected = plan["expected"]
        got = {s["index"]: (s["documents"], s["tokens"]) for s in written}
        for index in sorted(set(expected) | set(got)):
            if expected.get(index) != got.get(index):
                problems.append(f"shard {index}: (documents, tokens) planned {expected.get(index)}, "
                                f"written {got.get(index)}: gold's n_tokens disagrees with its tokens")
        total = sum(t for _, t in got.values())
        if total != plan["out_tokens"]:
            problems.append(f"the shards hold {total} tokens, the plan from gold.tokens says {plan['out_tokens']}")
        if plan["natural"] and total != plan["gold_tokens"]:
            problems.append(f"the shards hold {total} tokens (EOD included), gold.tokens holds {plan['gold_tokens']}")
        self.metrics.extra["validation"] = {"shards_checked": len(written), "problems": problems[:50]}
        if problems:
            shown = "\n  ".join(problems[:20])
            raise ExportValidationError(
                f"export validation failed with {len(problems)} problem(s); no manifest written, the previous "
                f"manifest and its shards are untouched, the rejected shards are in {staging}:\n  {shown}")

    def write_lineage(self, spark, placed, written, sources) -> dict:
        """(shard, i) -> doc_id -> url, warc_file, warc_offset for every exported sequence (overwritten whole)."""
        from pyspark.sql import functions as F

        path = self.table(self.cfg.export.lineage_table)
        prefixes = local_frame(spark, [(s["index"], s["prefix"]) for s in written] or [(-1, "")],
                               "shard int, shard_prefix string")
        silver_version = sources["silver.documents"]["version"]
        if silver_version is None:  # gold made elsewhere: URLs only
            silver = local_frame(spark, [], "doc_id string, warc_file string, warc_offset long")
        else:
            silver = (spark.read.format("delta").option("versionAsOf", silver_version)
                      .load(self.table("silver.documents")).select("doc_id", "warc_file", "warc_offset"))
        lineage = (placed.join(F.broadcast(prefixes), "shard").join(silver, "doc_id", "left")
                   .select(F.col("shard_prefix").alias("shard"), "i", "doc_id", "copy", "source", "stage", "url",
                           "warc_file", "warc_offset"))
        lineage.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
        return {"path": self.paths.table(self.cfg.export.lineage_table), "version": table_version(spark, path)}

    def publish(self, shards_dir, staging, written, sources, tokenizer, dtype, version, gold_path, spark,
                config_sha, plan, lineage):
        """Move the checked shards in, write the manifest last (atomically), then drop shards nothing names."""
        import numpy as np

        keep = {MANIFEST}
        for shard in written:
            for suffix in SHARD_FILES:
                name = shard["prefix"] + suffix
                target = storage.join(shards_dir, name)
                if storage.exists(target):  # the name is the content hash: the same bytes are already there
                    storage.remove(storage.join(staging, name))
                else:
                    storage.move(storage.join(staging, name), target)
                keep.add(name)
        # the files that arrived are the files that were hashed: checked on the executors, a shard per task
        hashed = [(s["prefix"], s["bin_sha256"]) for s in written]
        arrived = (spark.sparkContext.parallelize(hashed, max(1, len(hashed)))
                   .map(lambda s: (s[0], s[1], storage.sha256(storage.join(shards_dir, s[0] + ".bin")))).collect())
        for prefix, hashed, found in arrived:
            if found != hashed:
                raise ExportValidationError(
                    f"{prefix}.bin in {shards_dir} has sha256 {found[:12]}…, the writer hashed "
                    f"{hashed[:12]}…; no manifest written, rerun jobs.export")
        committed = commit_info(spark, gold_path, version)["timestamp"]
        stage_of = {index: stage["stage"] for stage in plan["mix"]["stages"] for index in stage["shards"]}
        shards = [{**{k: s[k] for k in ("prefix", "documents", "tokens", "bin_sha256", "idx_sha256", "docs",
                                        "docs_sha256")}, "stage": stage_of[s["index"]]} for s in written]
        stages = []
        for stage in plan["mix"]["stages"]:
            members = [s for s in written if s["index"] in set(stage["shards"])]
            stages.append({"name": stage["stage"], "mix": stage["mix"], "share": stage["share"],
                           "shards": [s["prefix"] for s in members], "documents": sum(s["documents"] for s in members),
                           "tokens": sum(s["tokens"] for s in members)})
        manifest = {
            "format": FORMAT,
            "created": committed.replace(tzinfo=committed.tzinfo or timezone.utc).isoformat(),
            "sources": sources, "tokenizer": tokenizer, "dtype": np.dtype(dtype).name, "shards": shards,
            "totals": {"documents": sum(s["documents"] for s in shards), "tokens": sum(s["tokens"] for s in shards)},
            "mix": plan["mix"], "stages": stages, "shuffle_seed": self.cfg.export.shuffle_seed, "lineage": lineage,
            "config_sha256": config_sha,
        }
        manifest["sha256"] = canonical_sha256(manifest)
        manifest_path = storage.join(shards_dir, MANIFEST)
        storage.write_text(manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        for entry in storage.listdir(shards_dir):  # shards of older manifests: nothing names them any more
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if name.startswith("shard-") and name not in keep:
                storage.remove(entry)
        storage.remove(storage.join(shards_dir, self.cfg.export.staging_dir), recursive=True)
        log.info("export: %d shards, %d documents, %d tokens (%s) -> %s", len(shards),
                 manifest["totals"]["documents"], manifest["totals"]["tokens"], manifest["dtype"], manifest_path)
        self.metrics.extra.update(manifest=manifest_path, manifest_sha256=manifest["sha256"], shards=len(shards),
                                  tokens=manifest["totals"]["tokens"], dtype=manifest["dtype"], sources=sources,
                                  lineage=lineage)


if __name__ == "__main__":
    sys.exit(ExportJob.main())
