"""Paragraph-level dedup, CCNet style: a paragraph (a line, normalized and hashed) found in more than
`max_docs` documents stays in the first of them only, by survivor priority; with `within_doc` a line
repeated inside one document is kept once.  Boilerplate (cookie banners, "Share this", navigation
that extraction let through) goes this way.  A document left shorter than `min_doc_chars` is dropped
(reason too_short_after_paragraphs).  `mode: flag` counts the paragraphs and changes no text.
"""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from jobs.dedup.normalize import text_keys, words_of_batch


def paragraph_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body: (doc_id, pos, line, ...) -> the same columns less `line`, plus `key` (null for a line
    of no words): the lines' text never has to leave this stage."""
    for batch in batches:
        words, offsets = words_of_batch(batch.column("line"))
        names = [n for n in batch.schema.names if n != "line"]
        yield pa.RecordBatch.from_arrays([*(batch.column(n) for n in names), pa.array(text_keys(words, offsets), pa.string())],
                                         names=[*names, "key"])


def dedup_paragraphs(docs, cfg, cached: list | None = None):
    """docs (doc_id, text, p_quality, p_time) -> (doc_id, text, paragraphs_removed, drop_reason).

    Only (doc_id, pos, key, priority) rows are shuffled, never the lines: the positions to remove are
    gathered per document and the text is rebuilt from its own lines.  The persisted key rows are added to
    `cached`, for the caller to unpersist once it has used the result."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # the survivor priority travels with each line as two sortable numbers (no join back to the documents)
    lines = docs.select("doc_id", F.coalesce(-F.col("p_quality").cast("double"), F.lit(float("inf"))).alias("q"),
                        F.coalesce(-F.unix_micros("p_time"), F.lit(2**62)).alias("t"),
                        F.posexplode(F.split("text", "\n")).alias("pos", "line"))
    keyed = (lines.select("doc_id", F.col("pos").cast("int").alias("pos"), "line", "q", "t")
             .mapInArrow(paragraph_keys, "doc_id string, pos int, q double, t long, key string")
             .where(F.col("key").isNotNull()).persist(StorageLevel.MEMORY_AND_DISK))
    if cached is not None:
        cached.append(keyed)
    # one row per distinct paragraph: in how many documents, and the first of them by survivor priority
    order = F.struct("q", "t", "doc_id", "pos")
    stats = (keyed.groupBy("key")
             .agg(F.countDistinct("doc_id").alias("n_docs"), F.min_by("doc_id", order).alias("first_doc")))
    in_doc = Window.partitionBy("key", "doc_id").orderBy("pos")
    removed = (keyed.join(stats, "key")
               .withColumn("nth_in_doc", F.row_number().over(in_doc))
               .where((F.lit(cfg.within_doc) & (F.col("nth_in_doc") > 1))
                      | ((F.col("n_docs") > cfg.max_docs) & (F.col("doc_id") != F.col("first_doc"))))
               .groupBy("doc_id").agg(F.collect_set("pos").alias("removed")))
    n_removed = F.when(F.col("removed").isNull(), F.lit(0)).otherwise(F.size("removed"))
    if cfg.mode == "remove":
        text = F.concat_ws("\n", F.expr("transform(split(text, '\\n'), (l, i) -> "
                                        "if(removed IS NOT NULL AND array_contains(removed, i), null, l))"))
    else:
        text = F.col("text")
    short = (n_removed > 0) & (F.length(text) < cfg.min_doc_chars) & F.lit(cfg.mode == "remove")
    return (docs.select("doc_id", "text").join(removed, "doc_id", "left")
            .select("doc_id", text.alias("text"), n_removed.alias("paragraphs_removed"),
                    F.when(short, F.lit("too_short_after_paragraphs")).alias("drop_reason")))
