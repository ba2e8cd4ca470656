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
    """`mapInArrow` body: (doc_id, pos, line) -> (doc_id, pos, line, key); key null for a line of no words."""
    for batch in batches:
        words, offsets = words_of_batch(batch.column("line"))
        yield pa.RecordBatch.from_arrays(
            [batch.column("doc_id"), batch.column("pos"), batch.column("line"),
             pa.array(text_keys(words, offsets), pa.string())], names=["doc_id", "pos", "line", "key"])


def dedup_paragraphs(docs, cfg):
    """docs (doc_id, text, p_quality, p_time) -> (doc_id, text, paragraphs_removed, drop_reason)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = (docs.select("doc_id", "p_quality", "p_time", F.posexplode(F.split("text", "\n")).alias("pos", "line")))
    keyed = (lines.select("doc_id", F.col("pos").cast("int").alias("pos"), "line")
             .mapInArrow(paragraph_keys, "doc_id string, pos int, line string, key string")
             .join(lines.select("doc_id", "p_quality", "p_time").distinct(), "doc_id"))
    # one row per distinct paragraph: in how many documents, and the first of them by survivor priority
    order = F.struct(F.coalesce(-F.col("p_quality").cast("double"), F.lit(float("inf"))),
                     F.coalesce(-F.unix_micros("p_time"), F.lit(2**62)), "doc_id", "pos")
    stats = (keyed.where(F.col("key").isNotNull()).groupBy("key")
             .agg(F.countDistinct("doc_id").alias("n_docs"), F.min_by("doc_id", order).alias("first_doc")))
    in_doc = Window.partitionBy("key", "doc_id").orderBy("pos")
    marked = (keyed.join(stats, "key", "left")
              .withColumn("nth_in_doc", F.row_number().over(in_doc))
              .withColumn("remove", F.col("key").isNotNull() & (
                  (F.lit(cfg.within_doc) & (F.col("nth_in_doc") > 1))
                  | ((F.col("n_docs") > cfg.max_docs) & (F.col("doc_id") != F.col("first_doc"))))))
    rebuilt = (marked.groupBy("doc_id")
               .agg(F.array_sort(F.collect_list(F.struct("pos", "line", "remove"))).alias("parts"),
                    F.sum(F.col("remove").cast("int")).alias("paragraphs_removed")))
    kept_lines = "filter(parts, p -> NOT p.remove)" if cfg.mode == "remove" else "parts"
    text = F.concat_ws("\n", F.expr(f"transform({kept_lines}, p -> p.line)"))
    short = (F.col("paragraphs_removed") > 0) & (F.length("text") < cfg.min_doc_chars) & F.lit(cfg.mode == "remove")
    return (rebuilt.select("doc_id", text.alias("text"), "paragraphs_removed")
            .withColumn("drop_reason", F.when(short, F.lit("too_short_after_paragraphs"))))
