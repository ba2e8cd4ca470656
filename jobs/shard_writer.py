"""Megatron indexed shards (SEAMS §4): plan the split, write one shard, hash files. No Spark.

A shard is written by megatron-core's own `IndexedDatasetBuilder`: one sequence per document,
the tokenizer's EOD appended, plus a `docs.jsonl` sidecar naming each sequence's document.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Iterable, Sequence


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


def plan_shards(lengths: Sequence[int], target_tokens: int, max_shards: int = 0) -> list[tuple[int, int]]:
    """Contiguous `[start, end)` ranges over documents in order; a shard closes once it holds
    `target_tokens` (EOD included).  With `max_shards`, the target grows so that no more are made."""
    total = sum(n + 1 for n in lengths)
    if max_shards > 0:
        target_tokens = max(target_tokens, -(-total // max_shards))
    ranges, start, filled = [], 0, 0
    for i, n in enumerate(lengths):
        filled += n + 1
        if filled >= target_tokens:
            ranges.append((start, i + 1))
            start, filled = i + 1, 0
    if start < len(lengths):
        ranges.append((start, len(lengths)))
    return ranges


def token_dtype(vocab_size: int):
    """uint16 when vocab_size < 65,500, else int32: megatron-core's own rule."""
    from megatron.core.datasets.indexed_dataset import DType

    return DType.optimal_dtype(vocab_size)


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_shard(folder: str, index: int, docs: Iterable[tuple[int, str, str, Sequence[int]]],
                dtype, eod_id: int) -> dict:
    """Write `<folder>/shard-XXXXX.{bin,idx,docs.jsonl}` from `(i, doc_id, url, tokens)` in order."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    name = shard_name(index)
    prefix = os.path.join(folder, name)
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    documents = tokens = 0
    with open(prefix + ".docs.jsonl", "w", encoding="utf-8") as sidecar:
        for i, doc_id, url, ids in docs:
            sequence = np.asarray(list(ids) + [eod_id], dtype=dtype)
            builder.add_item(torch.from_numpy(sequence.astype(np.int64)))
            builder.end_document()
            sidecar.write(json.dumps({"i": i, "doc_id": doc_id, "url": url, "n_tokens": len(ids)},
                                     ensure_ascii=False) + "\n")
            documents += 1
            tokens += len(sequence)
    builder.finalize(prefix + ".idx")
    return {"index": index, "prefix": name, "documents": documents, "tokens": tokens,
            "bin_sha256": file_sha256(prefix + ".bin"), "idx_sha256": file_sha256(prefix + ".idx"),
            "docs": name + ".docs.jsonl"}
