"""`silver.deduped` (`tokenize.input_table`) -> SentencePiece BPE model + `gold.tokens` (SEAMS §3).

    python -m jobs.tokens [--lake DIR] [--tokenizer PATH/spm.model] [-o tokenize.vocab_size=8192]
    spark-submit jobs/tokens.py ...

Trains SentencePiece BPE (byte fallback, EOD/pad and fill-in-the-middle special tokens) on a
deterministic sample stratified by (language, source): docs whose sha1(doc_id) falls in the first
`sample_per_mille` of 1000 buckets, never the last `heldout_per_mille` (held back to measure fertility,
tokens per word, per language), each stratum capped at an equal share of `max_sample_chars`, in sha1
order.  The model is stored under `<paths.tokenizer_dir>/<sha256 prefix>/spm.model` and named in gold's
Delta table properties (`weblm.tokenizer.*`).  Then the silver documents whose text is new or changed
are encoded on the executors, Arrow batches in and out (`mapInArrow`), the model loaded once per
Python worker (EOD not included).  `--tokenizer` reuses an existing model instead of training.
"""
import hashlib
import itertools
import logging
import sys
from collections import Counter

import storage
from jobs import mixing
from jobs.base import SparkJob, is_empty, local_frame, merge_table, table_version, upsert_table
from jobs.text import bpe

log = logging.getLogger("weblm.jobs.tokenize")

GOLD_COLUMNS = ("doc_id", "url", "source", "language", "tokens", "n_tokens", "tokenizer_sha256", "text_sha256")
TAG_COLUMNS = ("source", "language")  # re-tagged in place (no re-encoding) when the rules or the language change


def gold_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("doc_id", T.StringType()),
        T.StructField("url", T.StringType()),
        T.StructField("source", T.StringType()),     # export.mix.rules' tag: the mix samples by it
        T.StructField("language", T.StringType()),   # the quality stage's language ("und" when unknown)
        T.StructField("tokens", T.ArrayType(T.IntegerType())),
        T.StructField("n_tokens", T.IntegerType()),
        T.StructField("tokenizer_sha256", T.StringType()),
        T.StructField("text_sha256", T.StringType()),  # silver's content_sha256 of the text encoded
    ])


def token_lists(ids: list[list[int]]):
    """SentencePiece's lists of ids -> one Arrow list<int32> array (flat values + offsets, no per-row objects)."""
    import numpy as np
    import pyarrow as pa

    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)), pa.array(lengths)


def encode_arrow(batches, model: bytes, digest: str):
    """`mapInArrow` body: (doc_id, url, source, language, text, content_sha256) batches -> gold rows.  `model` travels in the
    closure (a few hundred KB) and is loaded once per Python worker (`bpe.processor` caches by hash)."""
    import pyarrow as pa

    sp = None
    for batch in batches:
        sp = sp or bpe.processor(model, digest)
        texts = [t or "" for t in batch.column("text").to_pylist()]
        tokens, lengths = token_lists(sp.encode(texts))  # one call per batch: SentencePiece loops in C++
        yield pa.RecordBatch.from_arrays(
            [batch.column("doc_id"), batch.column("url"), batch.column("source"), batch.column("language"),
             tokens, lengths,
             pa.array([digest] * batch.num_rows, pa.string()), batch.column("content_sha256")],
            names=list(GOLD_COLUMNS))


def fertility_arrow(batches, model: bytes, digest: str):
    """`mapInArrow` body: (language, text) batches -> per-language (docs, words, tokens) partial sums."""
    import pyarrow as pa

    sp, sums = None, {}
    for batch in batches:
        sp = sp or bpe.processor(model, digest)
        texts = [t or "" for t in batch.column("text").to_pylist()]
        for language, text, ids in zip(batch.column("language").to_pylist(), texts, sp.encode(texts)):
            docs, words, tokens = sums.get(language, (0, 0, 0))
            sums[language] = (docs + 1, words + len(text.split()), tokens + len(ids))
    if sums:
        yield pa.RecordBatch.from_pylist([{"language": k, "docs": d, "words": w, "tokens": t}
                                          for k, (d, w, t) in sums.items()])


class TokenizeJob(SparkJob):
    name = "tokenize"
    description = "silver.deduped -> SentencePiece BPE model + gold.tokens"

    def add_arguments(self, parser):
        parser.add_argument("--tokenizer", help="an existing spm.model to reuse instead of training one")

    def buckets(self):
        """sha1(doc_id) -> one of 1000 buckets: which documents train and which are held back."""
        from pyspark.sql import functions as F

        return F.conv(F.substring(F.sha1(F.col("doc_id")), 1, 8), 16, 10).cast("long") % 1000

    def sample_texts(self, silver):
        """The training sample, deterministic and stratified: an equal character cap per (language, source)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cfg, mix = self.cfg.tokenize, self.cfg.export.mix
        train = silver.where(self.buckets() < min(cfg.sample_per_mille, 1000 - cfg.heldout_per_mille))
        if silver.limit(1).count() and not train.limit(1).count():
            # A silver of a handful of documents can fall wholly in the held-back buckets: train on all of it
            # rather than on nothing (SentencePiece refuses an empty sample); fertility is then not held out.
            log.warning("tokenize: every document of silver falls in the held-back buckets (heldout_per_mille=%d); "
                        "the tokenizer trains on all of them", cfg.heldout_per_mille)
            self.metrics.extra["sample_includes_heldout"] = True
            train = silver
        train = (train
                 .withColumn("source", mixing.source_tag(train, mix))
                 .withColumn("language", F.coalesce(F.col("language"), F.lit("und")))
                 .withColumn("rank", F.sha1(F.col("doc_id"))))
        train = train.withColumn("chars", F.length(F.coalesce(F.col("text"), F.lit(""))))
        sizes = train.groupBy("language", "source").agg(F.sum("chars").alias("chars")).collect()
        cap = cfg.max_sample_chars // max(1, len(sizes))
        # thin each stratum by hash to about twice its cap first, so that no task sorts a whole large stratum
        strata = [(r["language"], r["source"], min(1.0, 2.0 * cap / max(1, r["chars"] or 0)))
                             for r in sizes]
        keep = local_frame(train.sparkSession, strata or [("", "", 0.0)],
                           "language string, source string, keep double")
        in_stratum = Window.partitionBy("language", "source").orderBy("rank", "doc_id")
        rows = (train.join(F.broadcast(keep), ["language", "source"])
                .where(mixing.unit_hash(0, F.col("doc_id")) < F.col("keep"))
                .withColumn("before", F.sum("chars").over(in_stratum) - F.col("chars"))
                .where(F.col("before") < cap)
                .orderBy("language", "source", "rank", "doc_id")
                .select("doc_id", "language", "source", "text", (F.lit(cap) - F.col("before")).alias("room")))
        digest, chars, docs, by_stratum = hashlib.sha256(), 0, 0, Counter()
        for row in rows.toLocalIterator():
            text = (row.text or "")[: row.room]
            digest.update(row.doc_id.encode() + b"\0" + text.encode("utf-8") + b"\0")
            chars, docs = chars + len(text), docs + 1
            by_stratum[f"{row.language}/{row.source}"] += len(text)
            yield text
        self.metrics.extra.update(sample_docs=docs, sample_chars=chars, sample_sha256=digest.hexdigest(),
                                  sample_strata=dict(sorted(by_stratum.items())), sample_cap_per_stratum=cap)

    def fertility(self, silver, model: bytes, digest: str) -> dict:
        """Tokens per word per language on held-back documents (never in the training sample)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cfg = self.cfg.tokenize
        if cfg.heldout_per_mille <= 0 or cfg.fertility_docs <= 0:
            return {}
        per_language = Window.partitionBy("language").orderBy(F.sha1(F.col("doc_id")), "doc_id")
        held = (silver.where(self.buckets() >= 1000 - cfg.heldout_per_mille)
                .withColumn("language", F.coalesce(F.col("language"), F.lit("und")))
                .withColumn("n", F.row_number().over(per_language)).where(F.col("n") <= cfg.fertility_docs)
                .select("language", "text"))
        sums = (held.mapInArrow(lambda batches: fertility_arrow(batches, model, digest),
                                "language string, docs long, words long, tokens long")
                .groupBy("language").agg(F.sum("docs").alias("docs"), F.sum("words").alias("words"),
                                         F.sum("tokens").alias("tokens")).collect())
        report = {r["language"]: {"docs": int(r["docs"]), "words": int(r["words"]), "tokens": int(r["tokens"]),
                                  "tokens_per_word": round(r["tokens"] / r["words"], 4) if r["words"] else None}
                  for r in sums}
        for language, row in sorted(report.items()):
            log.info("tokenize: fertility %s: %s tokens/word over %d held-back docs", language,
                     row["tokens_per_word"], row["docs"])
        return dict(sorted(report.items()))

    def current_tokenizer(self, spark) -> str | None:
        """The tokenizer gold.tokens was made with, when it is one (reused so that runs stay incremental)."""
        gold = self.table("gold.tokens")
        if table_version(spark, gold) is None:
            return None
        digests = [r[0] for r in spark.read.format("delta").load(gold).select("tokenizer_sha256").distinct()
                   .limit(2).collect()]
        return digests[0] if len(digests) == 1 else None

    def train(self, silver) -> tuple[str, bytes]:
        cfg = self.cfg.tokenize
        dropped = Counter()
        model = bpe.train_bpe(self.sample_texts(silver), cfg, dropped)
        path = bpe.save_model(model, self.paths.tokenizer_dir, cfg.hash_prefix_len)
        self.metrics.extra.update(sample_lines=dropped["lines"], sample_lines_too_long=dropped["lines_too_long"])
        if dropped["lines_too_long"]:
            log.warning("tokenize: %d training lines (%d bytes) longer than tokenize.max_sentence_length=%d bytes "
                        "were left out of the tokenizer's sample", dropped["lines_too_long"],
                        dropped["bytes_too_long"], cfg.max_sentence_length)
        log.info("tokenize: trained BPE on %d docs / %d chars / %d lines -> %s", self.metrics.extra["sample_docs"],
                 self.metrics.extra["sample_chars"], dropped["lines"], path)
        return path, model

    def run_job(self, spark, args):
        from pyspark.sql import functions as F

        cfg = self.cfg.tokenize
        silver = spark.read.format("delta").load(self.table(cfg.input_table))  # silver.deduped by default
        current = None if (args.full or args.tokenizer) else self.current_tokenizer(spark)
        trained = False
        if args.tokenizer:
            path, model = args.tokenizer, storage.read_bytes(args.tokenizer)
            log.info("tokenize: reusing %s", path)
        elif current:
            path, model = bpe.load_model(self.paths.tokenizer_dir, current, cfg.hash_prefix_len)
            log.info("tokenize: gold.tokens was made with %s; reusing it (--full trains a new one)", path)
        else:
            path, model = self.train(silver)
            trained = True
        digest = bpe.sha256_hex(model)
        info = bpe.model_info(model)
        if trained:
            self.metrics.extra["fertility"] = self.fertility(silver, model, digest)
        gold_path = self.table("gold.tokens")
        language = F.coalesce(F.col("language"), F.lit("und")) if "language" in silver.columns else F.lit("und")
        inputs = silver.select("doc_id", "url", mixing.source_tag(silver, self.cfg.export.mix).alias("source"),
                               language.alias("language"), "text", "content_sha256")
        retag = None
        exists = table_version(spark, gold_path) is not None
        gold = spark.read.format("delta").load(gold_path) if exists else None
        rewrite = exists and not set(TAG_COLUMNS) <= set(gold.columns)
        if rewrite:
            log.warning("tokenize: gold.tokens predates its source/language columns; rewriting it whole")
        full = args.full or rewrite
        if full or not exists:
            todo, gone = inputs, None
        else:  # new documents, documents whose text changed, and any made with another tokenizer
            made = gold.where(F.col("tokenizer_sha256") == digest).select(
                "doc_id", F.col("text_sha256").alias("content_sha256"), *TAG_COLUMNS)
            todo = inputs.join(made.drop(*TAG_COLUMNS), ["doc_id", "content_sha256"], "left_anti")
            gone = gold.select("doc_id").join(silver.select("doc_id"), "doc_id", "left_anti")
            # same text, new tag (the rules or the language changed): the tokens stay, only the tags move
            moved = (inputs.select("doc_id", "content_sha256", *[F.col(c).alias("new_" + c) for c in TAG_COLUMNS])
                     .join(made, ["doc_id", "content_sha256"])
                     .where(" OR ".join(f"NOT (new_{c} <=> {c})" for c in TAG_COLUMNS)))
            retag = (gold.join(moved.select("doc_id", *["new_" + c for c in TAG_COLUMNS]), "doc_id")
                     .select(*[F.col("new_" + c).alias(c) if c in TAG_COLUMNS else F.col(c) for c in GOLD_COLUMNS]))
        retagged = retag.count() if retag is not None else 0
        self.metrics.extra.update(table="gold.tokens", mode="full" if full else "incremental",
                                  tokenizer_sha256=digest, tokenizer_model=path, retagged=retagged, **info)
        if is_empty(todo) and (gone is None or is_empty(gone)) and not retagged:
            log.info("tokenize: nothing new in %s since the last run; no table changed", cfg.input_table)
            self.metrics.extra["table_version"] = table_version(spark, gold_path)
            return
        batch_key = "spark.sql.execution.arrow.maxRecordsPerBatch"
        previous_batch = spark.conf.get(batch_key, None)
        spark.conf.set(batch_key, str(cfg.batch_rows))
        tokens = todo.mapInArrow(lambda batches: encode_arrow(batches, model, digest), gold_schema())
        if retagged:
            tokens = tokens.unionByName(retag)
        tokens = tokens.persist()
        try:  # the idempotent write compares before it merges: encode once, not per comparison
            self.metrics.input_rows = tokens.count()
            if rewrite:
                tokens.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(gold_path)
                result = {"inserted": self.metrics.input_rows, "updated": 0, "deleted": 0}
            elif full:
                result = merge_table(spark, tokens, gold_path, "doc_id", sync=True)
            else:
                result = upsert_table(spark, tokens, gold_path, "doc_id", delete_keys=gone)
        finally:
            tokens.unpersist()
            if previous_batch is None:
                spark.conf.unset(batch_key)
            else:
                spark.conf.set(batch_key, previous_batch)
        self.record_tokenizer(spark, gold_path, {"weblm.tokenizer.sha256": digest, "weblm.tokenizer.model": path,
                                                 "weblm.tokenizer.vocab_size": str(info["vocab_size"])})
        totals = spark.read.format("delta").load(gold_path).agg(
            F.sum("n_tokens").alias("tokens"), F.count(F.lit(1)).alias("rows"),
            F.sum(F.when(F.col("n_tokens") == 0, 1).otherwise(0)).alias("empty")).first()
        self.metrics.output_rows = self.metrics.input_rows
        self.metrics.extra.update(
            table_version=table_version(spark, gold_path), table_rows=int(totals["rows"]),
            tokens=int(totals["tokens"] or 0), empty_documents=int(totals["empty"] or 0),
            rows_inserted=result["inserted"], rows_updated=result["updated"], rows_deleted=result["deleted"])

    def record_tokenizer(self, spark, gold_path: str, properties: dict) -> None:
        """Name the tokenizer in gold's Delta table properties; no commit when they already say so."""
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{gold_path}`").first()
        current = dict(detail["properties"] or {})
        if all(current.get(k) == v for k, v in properties.items()):
            return
        quote = lambda text: "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"  # Spark SQL literals
        assignments = ", ".join(f"{quote(k)} = {quote(v)}" for k, v in properties.items())
        spark.sql(f"ALTER TABLE delta.`{gold_path}` SET TBLPROPERTIES ({assignments})")


if __name__ == "__main__":
    sys.exit(TokenizeJob.main())
