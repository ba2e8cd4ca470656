"""Build a shard folder per SEAMS §4 for the trainer's tests: megatron's IndexedDatasetBuilder + manifest.

Documents are arithmetic token runs (start random, stride 1 or 2, wrapping inside the non-special
ids), so a tiny model can learn them within a few dozen steps: loss visibly falls.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

from trainer.manifest import canonical_sha256, file_sha256

VOCAB = 256
EOD = 2
FIRST_TEXT_ID = 3
SOURCES = ("web", "code")   # the mix source of each document, alternating


def synthetic_document(rng: np.random.Generator, min_len: int = 20, max_len: int = 120) -> np.ndarray:
    length = int(rng.integers(min_len, max_len))
    start, stride = int(rng.integers(0, VOCAB - FIRST_TEXT_ID)), int(rng.integers(1, 3))
    return FIRST_TEXT_ID + (start + stride * np.arange(length)) % (VOCAB - FIRST_TEXT_ID)


def doc_id_for(shard: int, i: int) -> str:
    return hashlib.sha1(f"shard{shard}-doc{i}".encode()).hexdigest()


def build_shards(folder: Path, n_shards: int = 2, docs_per_shard: int = 60, seed: int = 0,
                 tokenizer: tuple[str, str] = ("var/tokenizer/test/spm.model", "ab" * 32),
                 documents: list[list[int]] | None = None,
                 stages: list[tuple[str, list[int]]] | None = None,
                 shard_documents: list[list[list[int]]] | None = None) -> Path:
    """Write shard-0000k.{bin,idx,docs.jsonl} and manifest.json; return the manifest path.

    `tokenizer` is the manifest's (model, sha256): a path or URI as the export job writes it.
    `documents` (token ids below VOCAB, without EOD): shard k holds documents[k::n_shards] instead of
    synthetic runs; `shard_documents`: shard k holds shard_documents[k] (shards of any sizes).  `stages`: a staged
    mix, [(stage name, [shard numbers])] in training order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries, total_tokens = [], 0
    for k in range(n_shards):
        prefix = f"shard-{k:05d}"
        builder = IndexedDatasetBuilder(str(folder / f"{prefix}.bin"), dtype=np.uint16)
        tokens = 0
        with open(folder / f"{prefix}.docs.jsonl", "w") as docs:
            mine = documents[k::n_shards] if documents is not None else None
            mine = shard_documents[k] if shard_documents is not None else mine
            count = len(mine) if mine is not None else docs_per_shard
            for i in range(count):
                body = np.asarray(mine[i]) if mine is not None else synthetic_document(rng)
                doc = np.append(body, EOD).astype(np.uint16)   # EOD appended, as the jobs do
                builder.add_document(torch.from_numpy(doc.astype(np.int64)), [len(doc)])
                docs.write(json.dumps({"i": i, "doc_id": doc_id_for(k, i), "url": f"http://s{k}.weblm.test/{i}",
                                       "n_tokens": len(doc), "source": SOURCES[i % 2]}) + "\n")
                tokens += len(doc)
        builder.finalize(str(folder / f"{prefix}.idx"))
        entries.append({"prefix": prefix, "documents": count, "tokens": tokens,
                        "bin_sha256": file_sha256(folder / f"{prefix}.bin"),
                        "idx_sha256": file_sha256(folder / f"{prefix}.idx"), "docs": f"{prefix}.docs.jsonl"})
        total_tokens += tokens
    manifest = {
        "format": "megatron-indexed/1", "created": "2025-01-01T00:00:00Z",
        "sources": {"gold.tokens": {"path": "var/lake/gold/tokens", "version": 3},
                    "silver.documents": {"path": "var/lake/silver/documents", "version": 2},
                    "bronze.pages": {"path": "var/lake/bronze/pages", "version": 1}},
        "tokenizer": {"type": "sentencepiece-bpe", "model": tokenizer[0],
                      "sha256": tokenizer[1], "vocab_size": VOCAB, "eod_id": EOD, "pad_id": 0},
        "dtype": "uint16", "shards": entries,
        "totals": {"documents": sum(e["documents"] for e in entries), "tokens": total_tokens},
    }
    if stages:
        manifest["stages"] = [{"name": name, "mix": name, "shards": [entries[k]["prefix"] for k in ids]}
                              for name, ids in stages]
    manifest["sha256"] = canonical_sha256(manifest)
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2))
    return path


if __name__ == "__main__":   # build a demo shard folder: python tests/trainer/shardkit.py DIR [SHARDS DOCS]
    import sys
    print(build_shards(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:4])))
