"""The Spark side of MinHash-LSH: sign documents, the band table, candidate pairs, exact Jaccard.

    signals  (doc_id, text_key, n_words, n_shingles, signature, band_hashes)   one mapInArrow pass
    bands    (band, band_hash, doc_id)          one row per band of each distinct text: the LSH index
    pairs    (a, b, jaccard, estimate, verified) the candidates of the buckets new documents fell into

A bucket of up to `all_pairs_max_bucket` documents yields all its pairs (so verified pairs are complete
where duplicates really are); a larger bucket, a template or a syndicated page seen thousands of times,
yields a star from its smallest doc_id: linear in its size, and enough for connected components.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

from jobs.dedup import minhash
from jobs.dedup.normalize import hash_keys, word_hashes_of_batch


def signal_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("doc_id", T.StringType()),
        T.StructField("text_key", T.StringType()),
        T.StructField("n_words", T.IntegerType()),
        T.StructField("n_shingles", T.IntegerType()),
        T.StructField("signature", T.ArrayType(T.IntegerType())),
        T.StructField("band_hashes", T.ArrayType(T.LongType())),
    ])


def _list_column(matrix: np.ndarray, present: np.ndarray, value_type) -> pa.Array:
    """Rows of `matrix` as a list column, null where `present` is False."""
    width = matrix.shape[1]
    offsets = np.arange(matrix.shape[0] + 1, dtype=np.int32) * width
    values = pa.array(matrix.ravel(), value_type)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~present))


def sign_batch(doc_ids: pa.Array, texts: pa.Array, cfg) -> pa.RecordBatch:
    """One Arrow batch of documents -> their signals (`signal_schema`), all documents at once."""
    word_hash, offsets = word_hashes_of_batch(texts)
    shingles, shingle_offsets = minhash.shingle_hashes(word_hash, offsets, cfg.ngram)
    n_shingles = np.diff(shingle_offsets)
    sigs = minhash.signatures(shingles, shingle_offsets, cfg.num_perm, cfg.seed)
    bands = minhash.band_hashes(sigs, cfg.bands, cfg.rows)
    present = n_shingles > 0
    return pa.RecordBatch.from_arrays([
        doc_ids.cast(pa.string()), pa.array(hash_keys(word_hash, offsets), pa.string()),
        pa.array(np.diff(offsets).astype(np.int32)), pa.array(n_shingles.astype(np.int32)),
        _list_column(sigs.view(np.int32), present, pa.int32()),
        _list_column(bands, present, pa.int64())], names=[f.name for f in signal_schema().fields])


def sign_batches(batches: Iterator[pa.RecordBatch], cfg) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body over (doc_id, text)."""
    for batch in batches:
        yield sign_batch(batch.column("doc_id"), batch.column("text"), cfg)


def band_rows(signals):
    """signals -> (band, band_hash, doc_id): one row per band of every signed document with shingles."""
    from pyspark.sql import functions as F

    return (signals.where(F.col("band_hashes").isNotNull())
            .select("doc_id", F.posexplode("band_hashes").alias("band", "band_hash"))
            .select(F.col("band").cast("int").alias("band"), "band_hash", "doc_id"))


def candidate_pairs(all_bands, new_bands, all_pairs_max_bucket: int, priority=None, touched_is_all: bool = False,
                    cached: list | None = None):
    """(a, b) with a < b: pairs of the buckets that `new_bands` touch, from the whole band table.

    A bucket of more than `all_pairs_max_bucket` documents gives a star instead of all its pairs: every member
    paired with the bucket's head, the document the survivor rule ranks first (`priority`: doc_id, p_quality,
    p_time; highest quality, then newest, then smallest doc_id), else its smallest doc_id.  Centred on the
    likely survivor, every near-duplicate in the bucket gets a verified pair with the document that is kept.
    `touched_is_all`: `all_bands` is `new_bands` (a full run), so every bucket is touched.
    Returns `(pairs, bucket_stats)`; bucket_stats has one row per touched bucket (band, band_hash, n).
    One shuffle by bucket counts the members; only buckets of two or more go on (most are single documents),
    persisted and added to `cached` for the caller to unpersist."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    touched = all_bands if touched_is_all else \
        all_bands.join(new_bands.select("band", "band_hash").distinct(), ["band", "band_hash"], "left_semi")
    bucket = Window.partitionBy("band", "band_hash")
    shared = (touched.withColumn("n", F.count("*").over(bucket)).where("n > 1")
              .persist(StorageLevel.MEMORY_AND_DISK))
    if cached is not None:
        cached.append(shared)
    buckets = shared.groupBy("band", "band_hash").agg(F.first("n").alias("n"), F.min("doc_id").alias("head"))
    small = (shared.where(F.col("n") <= all_pairs_max_bucket)
             .groupBy("band", "band_hash").agg(F.array_sort(F.collect_list("doc_id")).alias("docs"))
             .select(F.expr("inline(flatten(transform(sequence(1, size(docs) - 1), i -> "
                            "transform(slice(docs, i + 1, size(docs) - i), d -> named_struct('a', docs[i - 1], 'b', d)))))")))
    members = shared.where(F.col("n") > all_pairs_max_bucket).select("band", "band_hash", "doc_id")
    first = Window.partitionBy("band", "band_hash").orderBy(F.desc_nulls_last("p_quality"), F.desc_nulls_last("p_time"),
                                                             F.asc("doc_id"))
    if priority is not None:
        members = members.join(priority.select("doc_id", "p_quality", "p_time"), "doc_id", "left")
    else:
        members = members.select("*", F.lit(None).cast("double").alias("p_quality"),
                                 F.lit(None).cast("timestamp").alias("p_time"))
    large = (members.withColumn("head", F.first("doc_id").over(first)).where(F.col("doc_id") != F.col("head"))
             .select(F.least("head", "doc_id").alias("a"), F.greatest("head", "doc_id").alias("b")))
    pairs = small.unionByName(large).where("a != b").distinct()
    return pairs, buckets


def _matrix(column: pa.Array) -> np.ndarray:
    """A list column of equal-length int lists as a 2-D array (one row per list)."""
    column = column.cast(pa.list_(pa.int32()))
    n = len(column)
    values = column.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(n, -1) if n else values.reshape(0, 0)


def verify_batches(batches: Iterator[pa.RecordBatch], ngram: int) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body: (a, b, ta, tb, sig_a, sig_b) -> (a, b, jaccard, estimate): the exact Jaccard of the
    two texts' shingle sets (both sides shingled in one vectorized pass per batch) and the signatures' estimate."""
    for batch in batches:
        n = batch.num_rows
        texts = pa.concat_arrays([batch.column("ta").cast(pa.large_string()), batch.column("tb").cast(pa.large_string())])
        word_hash, offsets = word_hashes_of_batch(texts)
        shingles, shingle_offsets = minhash.shingle_hashes(word_hash, offsets, ngram)
        sets = minhash.unique_sets(shingles, shingle_offsets)
        exact = [minhash.jaccard(sets[i], sets[n + i]) for i in range(n)]
        sa, sb = _matrix(batch.column("sig_a")), _matrix(batch.column("sig_b"))
        estimate = (sa == sb).mean(axis=1) if n else np.zeros(0)
        yield pa.RecordBatch.from_arrays([batch.column("a"), batch.column("b"), pa.array(exact, pa.float64()),
                                          pa.array(estimate, pa.float64())], names=["a", "b", "jaccard", "estimate"])


def score_pairs(pairs, signals, texts, cfg):
    """(a, b) -> (a, b, jaccard, estimate, verified): the signatures' estimate always; with
    `cfg.verify` the exact Jaccard of the two shingle sets (recomputed from the texts), else the estimate.
    Verified: each pair meets its two texts and signatures in one row, scored in one Python pass (two joins)."""
    from pyspark.sql import functions as F

    sig = signals.select("doc_id", "signature")
    if not cfg.verify:
        scored = (pairs.join(sig.withColumnRenamed("doc_id", "a").withColumnRenamed("signature", "sig_a"), "a")
                  .join(sig.withColumnRenamed("doc_id", "b").withColumnRenamed("signature", "sig_b"), "b")
                  .select("a", "b", (F.aggregate(F.zip_with("sig_a", "sig_b", lambda x, y: F.when(x == y, 1).otherwise(0)),
                                                 F.lit(0), lambda acc, v: acc + v) / F.size("sig_a")).alias("estimate")))
        return scored.select("a", "b", F.col("estimate").alias("jaccard"), "estimate", F.lit(False).alias("verified"))
    ids = pairs.select(F.col("a").alias("doc_id")).union(pairs.select(F.col("b").alias("doc_id"))).distinct()
    side = texts.select("doc_id", "text").join(ids, "doc_id", "left_semi").join(sig, "doc_id")
    joined = (pairs.join(side.select(F.col("doc_id").alias("a"), F.col("text").alias("ta"), F.col("signature").alias("sig_a")), "a")
              .join(side.select(F.col("doc_id").alias("b"), F.col("text").alias("tb"), F.col("signature").alias("sig_b")), "b")
              .select("a", "b", "ta", "tb", "sig_a", "sig_b"))
    return (joined.mapInArrow(lambda batches: verify_batches(batches, cfg.ngram), "a string, b string, jaccard double, estimate double")
            .withColumn("verified", F.lit(True)))
