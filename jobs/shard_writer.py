"""Megatron indexed shards (SEAMS §4): write shards on an executor, name them by content, check them. No Spark.

A shard is written by megatron-core's own `IndexedDatasetBuilder` (so the `.bin`/`.idx` bytes are
megatron's, whatever its version): one sequence per document with the tokenizer's EOD appended, plus a
`docs.jsonl` sidecar naming each sequence's document.  Its name carries the hash of its content,
`shard-<index>-<sha256[:16]>`, because megatron caches its sample indices by path, not by content.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Iterable, Iterator, Sequence

import storage
import trainer  # noqa: F401  (imports megatron.core without torch.compile on machines without CUDA: 3-4 s a worker)

SHARD_FILES = (".bin", ".idx", ".docs.jsonl")
NAME_HASH_LEN = 16


def shard_window(total_tokens: int, target_tokens: int, max_shards: int = 0) -> int:
    """Tokens per shard window: `target_tokens`, grown so that at most `max_shards` windows cover the total."""
    window = max(1, int(target_tokens))
    if max_shards > 0:
        window = max(window, -(-int(total_tokens) // max_shards))
    return window


def assign_shards(lengths: Sequence[int], window: int) -> list[int]:
    """Reference (one process) of export's placement: document j, in global order, goes to the window holding
    its first token, and windows that hold no first token are skipped.  Lengths include EOD."""
    raw, start = [], 0
    for n in lengths:
        raw.append(start // window)
        start += n
    dense = {r: i for i, r in enumerate(sorted(set(raw)))}
    return [dense[r] for r in raw]


def token_dtype(vocab_size: int):
    """uint16 when vocab_size < 65,500, else int32: megatron-core's own rule."""
    from megatron.core.datasets.indexed_dataset import DType

    return DType.optimal_dtype(vocab_size)


def file_sha256(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def content_name(index: int, bin_sha: str, idx_sha: str, docs_sha: str) -> str:
    content = hashlib.sha256(f"{bin_sha}:{idx_sha}:{docs_sha}".encode()).hexdigest()
    return f"shard-{index:05d}-{content[:NAME_HASH_LEN]}"


class ShardWriter:
    """One shard in a local folder: `add()` documents in order, then `close()` names it by content."""

    def __init__(self, folder: str, index: int, dtype, eod_id: int, vocab_size: int) -> None:
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        self.folder, self.index, self.dtype, self.eod_id, self.vocab_size = folder, index, dtype, eod_id, vocab_size
        self.tmp = os.path.join(folder, f"writing-{index:05d}")
        self.builder = IndexedDatasetBuilder(self.tmp + ".bin", dtype=dtype)
        self.sidecar = open(self.tmp + ".docs.jsonl", "w", encoding="utf-8")
        self.documents = self.tokens = self.bad_ids = 0

    def add(self, doc_id: str, url: str | None, source: str, copy: int, ids) -> None:
        import numpy as np
        import torch

        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            self.bad_ids += int(((ids < 0) | (ids >= self.vocab_size)).sum())  # validation refuses the shard
        sequence = np.empty(ids.size + 1, dtype=np.int64)
        sequence[:-1], sequence[-1] = ids, self.eod_id
        self.builder.add_item(torch.from_numpy(sequence))
        self.builder.end_document()
        self.sidecar.write(json.dumps({"i": self.documents, "doc_id": doc_id, "url": url, "n_tokens": int(ids.size),
                                       "source": source, "copy": int(copy)}, ensure_ascii=False) + "\n")
        self.documents += 1
        self.tokens += int(sequence.size)

    def close(self) -> dict:
        self.builder.finalize(self.tmp + ".idx")
        self.sidecar.close()
        shas = {suffix: file_sha256(self.tmp + suffix) for suffix in SHARD_FILES}
        name = content_name(self.index, shas[".bin"], shas[".idx"], shas[".docs.jsonl"])
        for suffix in SHARD_FILES:
            os.replace(self.tmp + suffix, os.path.join(self.folder, name + suffix))
        return {"index": self.index, "prefix": name, "documents": self.documents, "tokens": self.tokens,
                "bin_sha256": shas[".bin"], "idx_sha256": shas[".idx"], "docs_sha256": shas[".docs.jsonl"],
                "docs": name + ".docs.jsonl", "bad_ids": self.bad_ids}


def write_shards(batches: Iterable, folder: str, dtype, eod_id: int, vocab_size: int) -> Iterator[dict]:
    """Arrow batches of (shard, i, doc_id, url, source, copy, tokens), sorted by (shard, i) -> written shards.

    A partition may hold several whole shards.  megatron-core's builder writes local files, so for a URI
    each shard is built in a local temp folder on the executor and uploaded into `folder`.
    """
    remote = storage.is_uri(folder)
    local = tempfile.mkdtemp(prefix="weblm-shard-") if remote else folder
    writer = None

    def finish(w: ShardWriter) -> dict:
        shard = w.close()
        if remote:
            for suffix in SHARD_FILES:
                path = os.path.join(local, shard["prefix"] + suffix)
                storage.put_file(path, storage.join(folder, shard["prefix"] + suffix))
                os.remove(path)
        return shard

    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            shards = batch.column("shard").to_numpy()
            tokens = batch.column("tokens")
            values = tokens.values.to_numpy(zero_copy_only=False)
            offsets = tokens.offsets.to_numpy()
            doc_ids, urls = batch.column("doc_id").to_pylist(), batch.column("url").to_pylist()
            sources, copies = batch.column("source").to_pylist(), batch.column("copy").to_pylist()
            for row in range(batch.num_rows):
                shard = int(shards[row])
                if writer is None or writer.index != shard:
                    if writer is not None:
                        yield finish(writer)
                    writer = ShardWriter(local, shard, dtype, eod_id, vocab_size)
                writer.add(doc_ids[row], urls[row], sources[row], copies[row],
                           values[offsets[row]:offsets[row + 1]])
        if writer is not None:
            yield finish(writer)
    finally:
        if remote:
            import shutil

            shutil.rmtree(local, ignore_errors=True)


def validate_shard(folder: str, entry: dict, vocab_size: int, eod_id: int, dtype) -> list[str]:
    """What is wrong with one written shard (empty list: nothing): checksums, counts, ids, EOD, dtype.

    Reads the files as they landed in `folder` (a URI is fetched to a temp folder first), through
    megatron-core's `IndexedDataset`, the reader the trainer uses.
    """
    import numpy as np
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    name = entry["prefix"]
    with tempfile.TemporaryDirectory(prefix="weblm-check-") as tmp:
        if storage.is_uri(folder):
            for suffix in SHARD_FILES:
                storage.get_file(storage.join(folder, name + suffix), os.path.join(tmp, name + suffix))
            base = os.path.join(tmp, name)
        else:
            base = os.path.join(folder, name)
        problems = []
        for suffix, field in ((".bin", "bin_sha256"), (".idx", "idx_sha256"), (".docs.jsonl", "docs_sha256")):
            if not os.path.exists(base + suffix):
                return [f"{name}{suffix} is missing"]
            if file_sha256(base + suffix) != entry[field]:
                problems.append(f"{name}{suffix}: sha256 differs from what the writer hashed")
        if entry.get("bad_ids"):
            problems.append(f"{name}: {entry['bad_ids']} token ids outside [0, {vocab_size})")
        dataset = IndexedDataset(base)
        lengths = np.asarray(dataset.sequence_lengths, dtype=np.int64)
        if dataset.index.dtype != np.dtype(dtype):
            problems.append(f"{name}: dtype {dataset.index.dtype}, expected {np.dtype(dtype).name}")
        if len(dataset) != entry["documents"] or int(dataset.document_indices[-1]) != entry["documents"]:
            problems.append(f"{name}: {len(dataset)} sequences, the writer counted {entry['documents']}")
        if int(lengths.sum()) != entry["tokens"]:
            problems.append(f"{name}: {int(lengths.sum())} tokens, the writer counted {entry['tokens']}")
        data = np.memmap(base + ".bin", dtype=dataset.index.dtype, mode="r")
        if data.size != int(lengths.sum()):
            problems.append(f"{name}.bin holds {data.size} tokens, its index says {int(lengths.sum())}")
        elif data.size:
            if int(data.max()) >= vocab_size:
                problems.append(f"{name}: token id {int(data.max())} >= vocabulary size {vocab_size}")
            ends = np.cumsum(lengths) - 1
            missing = int((lengths < 1).sum()) + int((data[ends[lengths >= 1]] != eod_id).sum())
            if missing:
                problems.append(f"{name}: {missing} documents do not end with EOD {eod_id}")
        with open(base + ".docs.jsonl", encoding="utf-8") as sidecar:
            lines = sum(1 for _ in sidecar)
        if lines != entry["documents"]:
            problems.append(f"{name}.docs.jsonl has {lines} lines for {entry['documents']} documents")
        del data, dataset
    return problems
