"""Paragraph-level dedup, CCNet style: a paragraph (a line, normalized and hashed) found in more than
`max_docs` documents stays in the first of them only, by survivor priority; with `within_doc` a line
repeated inside one document is kept once.  Boilerplate (cookie banners, "Share this", navigation
that extraction let through) goes this way.  A document left shorter than `min_doc_chars` is dropped
(reason too_short_after_paragraphs).  `mode: flag` counts the paragraphs and changes no text.

How it stays cheap: one Arrow pass per batch of documents splits each text into lines, normalizes and
hashes them (the compiled word scan of `normalize`, then one 64-bit key per line) and emits one small row
per distinct paragraph of each document: (doc_id, key, priority, positions).  The lines' text never leaves
that pass.  One shuffle by key counts the documents of each paragraph and ranks them by survivor priority
(a window, no join back); only the rows that lose a line go on, grouped per document, and only those
documents' texts are rewritten (the rest pass through unchanged).
"""
from __future__ import annotations

from typing import Iterator

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.dedup.normalize import _mix64, word_hashes_of_batch

ROW_SCHEMA = "doc_id string, key long, q double, t long, pos array<int>"


@numba.njit(cache=True, nogil=True)
def _line_keys(word_hash, offsets):
    """One 64-bit key per line from its normalized words' hashes, in order (0 words: key 0, flagged absent).
    64 bits as datatrove's sentence dedup uses: ~1e-5 odds of one collision among 10^7 distinct paragraphs."""
    n = offsets.size - 1
    keys = np.empty(n, np.int64)
    present = np.zeros(n, np.bool_)
    for i in range(n):
        h = np.uint64(0x9E3779B97F4A7C15)
        for w in range(offsets[i], offsets[i + 1]):
            h = _mix64(h ^ word_hash[w]) + np.uint64(0x9E3779B97F4A7C15)
        count = offsets[i + 1] - offsets[i]
        present[i] = count > 0
        keys[i] = np.int64(_mix64(h ^ np.uint64(count)) & np.uint64(0x7FFFFFFFFFFFFFFF))
    return keys, present


def paragraph_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """(doc_id, text, q, t) -> `ROW_SCHEMA`: one row per distinct paragraph (line with words) of each document,
    with the positions (0-based line numbers, as Spark's split of the text on newlines counts them) where it occurs."""
    texts = batch.column("text").cast(pa.large_string())
    lists = pc.split_pattern(pc.fill_null(texts, ""), "\n")
    n_lines = np.asarray(pc.list_value_length(lists)).astype(np.int64)
    starts = np.zeros(len(n_lines) + 1, np.int64)
    np.cumsum(n_lines, out=starts[1:])
    word_hash, word_offsets = word_hashes_of_batch(lists.flatten())
    keys, present = _line_keys(word_hash, word_offsets)
    doc = np.repeat(np.arange(len(n_lines)), n_lines)
    pos = (np.arange(starts[-1]) - starts[doc]).astype(np.int32)
    doc, pos, keys = doc[present], pos[present], keys[present]
    order = np.lexsort((pos, keys, doc))  # by document, then paragraph, positions ascending
    doc, pos, keys = doc[order], pos[order], keys[order]
    first = np.ones(doc.size, bool)
    first[1:] = (doc[1:] != doc[:-1]) | (keys[1:] != keys[:-1])
    heads = np.flatnonzero(first)
    pos_offsets = np.append(heads, doc.size).astype(np.int32)
    rows = pa.array(doc[heads])
    return pa.RecordBatch.from_arrays(
        [batch.column("doc_id").take(rows), pa.array(keys[heads], pa.int64()), batch.column("q").take(rows),
         batch.column("t").take(rows), pa.ListArray.from_arrays(pa.array(pos_offsets), pa.array(pos, pa.int32()))],
        names=["doc_id", "key", "q", "t", "pos"])


def paragraph_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body of `paragraph_rows`."""
    for batch in batches:
        yield paragraph_rows(batch)


def dedup_paragraphs(docs, cfg):
    """docs (doc_id, text, p_quality, p_time) -> (doc_id, text, paragraphs_removed, drop_reason).

    Only the (doc_id, key, priority, positions) rows are shuffled, never the lines.  Nothing here is persisted:
    the caller persists the result."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # the survivor priority travels with each paragraph as two sortable numbers (no join back to the documents)
    rows = (docs.select("doc_id", "text", F.coalesce(-F.col("p_quality").cast("double"), F.lit(float("inf"))).alias("q"),
                        F.coalesce(-F.unix_micros("p_time"), F.lit(2**62)).alias("t"))
            .mapInArrow(paragraph_batches, ROW_SCHEMA))
    # per paragraph: in how many documents (one row per document holding it), and each one's rank by priority
    by_key = Window.partitionBy("key").orderBy("q", "t", "doc_id")
    everyone = by_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = rows.select("doc_id", "pos", F.count("*").over(everyone).alias("n_docs"),
                         F.row_number().over(by_key).alias("rank"))
    elsewhere = (F.col("n_docs") > cfg.max_docs) & (F.col("rank") > 1)
    lost = F.when(elsewhere, F.col("pos")).when(F.lit(cfg.within_doc) & (F.size("pos") > 1), F.expr("slice(pos, 2, size(pos))"))
    removed = (ranked.select("doc_id", lost.alias("lost")).where(F.col("lost").isNotNull())
               .groupBy("doc_id").agg(F.flatten(F.collect_list("lost")).alias("removed")))
    n_removed = F.when(F.col("removed").isNull(), F.lit(0)).otherwise(F.size("removed"))
    if cfg.mode == "remove":
        # only documents that lose a line are split and rebuilt (a null text reads as empty, as concat_ws makes it)
        text = F.when(F.col("removed").isNull(), F.coalesce("text", F.lit(""))).otherwise(
            F.concat_ws("\n", F.expr("transform(split(text, '\\n'), (l, i) -> if(array_contains(removed, i), null, l))")))
    else:
        text = F.col("text")
    short = (n_removed > 0) & (F.length(text) < cfg.min_doc_chars) & F.lit(cfg.mode == "remove")
    return (docs.select("doc_id", "text").join(removed, "doc_id", "left")
            .select("doc_id", text.alias("text"), n_removed.alias("paragraphs_removed"),
                    F.when(short, F.lit("too_short_after_paragraphs")).alias("drop_reason")))
