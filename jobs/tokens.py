"""`silver.documents` -> SentencePiece BPE model + `gold.tokens` (SEAMS §3).

    python -m jobs.tokenize [--lake DIR] [--tokenizer PATH/spm.model] [-o tokenize.vocab_size=8192]
    spark-submit jobs/tokenize.py ...

Trains on a deterministic sample (docs whose sha1(doc_id) falls in the first
`sample_per_mille` of 1000 buckets, in doc_id order, up to `max_sample_chars`), stores the model
under `<paths.tokenizer_dir>/<sha256 prefix>/spm.model`, then encodes every silver document
(EOD not included).  `--tokenizer` reuses an existing model instead of training.
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/<stage>.py` puts jobs/ first on sys.path, where jobs/tokenize.py would shadow
    # the standard library's `tokenize` (imported by linecache, hence by logging and tracebacks)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import hashlib  # noqa: E402
import logging  # noqa: E402

import storage  # noqa: E402
from jobs.base import SparkJob, is_empty, merge_table, table_version, upsert_table  # noqa: E402
from jobs.text import bpe  # noqa: E402

log = logging.getLogger("weblm.jobs.tokenize")

GOLD_COLUMNS = ("doc_id", "url", "tokens", "n_tokens", "tokenizer_sha256", "text_sha256")


def gold_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("doc_id", T.StringType()),
        T.StructField("url", T.StringType()),
        T.StructField("tokens", T.ArrayType(T.IntegerType())),
        T.StructField("n_tokens", T.IntegerType()),
        T.StructField("tokenizer_sha256", T.StringType()),
        T.StructField("text_sha256", T.StringType()),  # silver's content_sha256 of the text encoded
    ])


def encode_batches(batches, model_bc, digest: str):
    """`mapInPandas` body: the model bytes come by broadcast (a few hundred KB), loaded once per worker."""
    import pandas as pd

    sp = None
    for batch in batches:
        sp = sp or bpe.processor(model_bc.value, digest)
        ids = sp.encode(batch["text"].tolist())  # one call per batch: SentencePiece loops in C++
        yield pd.DataFrame({"doc_id": batch["doc_id"], "url": batch["url"], "tokens": ids,
                            "n_tokens": [len(t) for t in ids], "tokenizer_sha256": digest,
                            "text_sha256": batch["content_sha256"]})


class TokenizeJob(SparkJob):
    name = "tokenize"
    description = "silver.documents -> SentencePiece BPE model + gold.tokens"

    def add_arguments(self, parser):
        parser.add_argument("--tokenizer", help="an existing spm.model to reuse instead of training one")

    def sample_texts(self, silver):
        """The training sample, deterministic: hash buckets of doc_id, doc_id order, char cap."""
        from pyspark.sql import functions as F

        cfg = self.cfg.tokenize
        bucket = F.conv(F.substring(F.sha1(F.col("doc_id")), 1, 8), 16, 10).cast("long") % 1000
        rows = silver.where(bucket < cfg.sample_per_mille).orderBy("doc_id").select("doc_id", "text")
        digest, chars, docs = hashlib.sha256(), 0, 0
        for row in rows.toLocalIterator():
            if chars >= cfg.max_sample_chars:
                break
            text = row.text[: cfg.max_sample_chars - chars]
            digest.update(row.doc_id.encode() + b"\0" + text.encode("utf-8") + b"\0")
            chars, docs = chars + len(text), docs + 1
            yield text
        self.metrics.extra.update(sample_docs=docs, sample_chars=chars, sample_sha256=digest.hexdigest())

    def current_tokenizer(self, spark) -> str | None:
        """The tokenizer gold.tokens was made with, when it is one (reused so that runs stay incremental)."""
        gold = self.table("gold.tokens")
        if table_version(spark, gold) is None:
            return None
        digests = [r[0] for r in spark.read.format("delta").load(gold).select("tokenizer_sha256").distinct().collect()]
        return digests[0] if len(digests) == 1 else None

    def run_job(self, spark, args):
        from pyspark.sql import functions as F

        cfg = self.cfg.tokenize
        silver = spark.read.format("delta").load(self.table("silver.documents"))
        current = None if (args.full or args.tokenizer) else self.current_tokenizer(spark)
        if args.tokenizer:
            path, model = args.tokenizer, storage.read_bytes(args.tokenizer)
            log.info("tokenize: reusing %s", path)
        elif current:
            path, model = bpe.load_model(self.paths.tokenizer_dir, current, cfg.hash_prefix_len)
            log.info("tokenize: gold.tokens was made with %s; reusing it (--full trains a new one)", path)
        else:
            model = bpe.train_bpe(self.sample_texts(silver), cfg)
            path = bpe.save_model(model, self.paths.tokenizer_dir, cfg.hash_prefix_len)
            log.info("tokenize: trained BPE on %d docs / %d chars -> %s", self.metrics.extra["sample_docs"],
                     self.metrics.extra["sample_chars"], path)
        digest = bpe.sha256_hex(model)
        info = bpe.model_info(model)
        gold_path = self.table("gold.tokens")
        inputs = silver.select("doc_id", "url", "text", "content_sha256")
        if args.full or table_version(spark, gold_path) is None:
            todo, gone = inputs, None
        else:  # new documents, documents whose text changed, and any made with another tokenizer
            gold = spark.read.format("delta").load(gold_path)
            made = gold.where(F.col("tokenizer_sha256") == digest).select(
                "doc_id", F.col("text_sha256").alias("content_sha256"))
            todo = inputs.join(made, ["doc_id", "content_sha256"], "left_anti")
            gone = gold.select("doc_id").join(silver.select("doc_id"), "doc_id", "left_anti")
        self.metrics.extra.update(table="gold.tokens", mode="full" if args.full else "incremental",
                                  tokenizer_sha256=digest, tokenizer_model=path, **info)
        if is_empty(todo) and (gone is None or is_empty(gone)):
            log.info("tokenize: nothing new in silver.documents since the last run; no table changed")
            self.metrics.extra["table_version"] = table_version(spark, gold_path)
            return
        model_bc = spark.sparkContext.broadcast(model)
        tokens = todo.mapInPandas(lambda batches: encode_batches(batches, model_bc, digest), gold_schema()).persist()
        try:  # the idempotent write compares before it merges: encode once, not per comparison
            self.metrics.input_rows = tokens.count()
            if args.full:
                result = merge_table(spark, tokens, gold_path, "doc_id", sync=True)
            else:
                result = upsert_table(spark, tokens, gold_path, "doc_id", delete_keys=gone)
        finally:
            tokens.unpersist()
        totals = spark.read.format("delta").load(gold_path).agg({"n_tokens": "sum", "doc_id": "count"}).first()
        self.metrics.output_rows = self.metrics.input_rows
        self.metrics.extra.update(
            table_version=result["version"], table_rows=int(totals["count(doc_id)"]),
            tokens=int(totals["sum(n_tokens)"] or 0),
            rows_inserted=result["inserted"], rows_updated=result["updated"], rows_deleted=result["deleted"])


if __name__ == "__main__":
    TokenizeJob().run()
