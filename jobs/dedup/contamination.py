"""Contamination: n-gram overlap (13 words by default, as lm-eval and GPT-3) with evaluation sets.

The evaluation sets are JSONL files; each line's text is its `text_fields` joined.  Their n-gram hashes
(same normalization and hashing as dedup) are built once on the driver and shipped to executors in the
function's closure: a few MB even for large benchmarks.  A document with a hit is reported per
benchmark and, by `action`, either cut (lm-eval's Janitor: `cut_chars` around each hit removed,
fragments under `min_fragment_chars` dropped, more than `max_splits` cuts drops the document) or dropped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from jobs.dedup import minhash
from jobs.dedup.normalize import words_of_batch


@dataclass(frozen=True)
class EvalNgrams:
    hashes: np.ndarray       # sorted unique n-gram hashes of all evaluation sets
    benchmark: np.ndarray    # index into names, per hash (the first benchmark that has it)
    names: tuple[str, ...]

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Benchmark index of each hash, -1 where it is in no evaluation set."""
        if self.hashes.size == 0 or hashes.size == 0:
            return np.full(hashes.size, -1, np.int64)
        at = np.minimum(np.searchsorted(self.hashes, hashes), self.hashes.size - 1)
        return np.where(self.hashes[at] == hashes, self.benchmark[at], -1)


def ngram_hashes(texts: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(hashes, offsets, full)`: word n-gram hashes of each text in word order (shingle j starts at word
    j); `full[i]` is False for a text shorter than n words (its one shingle is no n-gram)."""
    words, offsets = words_of_batch(texts)
    hashes, hash_offsets = minhash.shingle_hashes(minhash.word_hashes(words), offsets, n)
    return hashes, hash_offsets, np.diff(offsets) >= n


def load_eval_ngrams(paths, text_fields, n: int) -> EvalNgrams:
    """The n-gram hashes of every evaluation file (a missing file is an error that names it)."""
    all_hashes, all_bench, names = [], [], []
    for i, path in enumerate(paths):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"evaluation set {path} (dedup.contamination.eval_sets) does not exist")
        texts = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                texts.append(" ".join(str(row[f]) for f in text_fields if row.get(f) is not None))
        hashes, offsets, full = ngram_hashes(pa.array(texts, pa.large_string()), n)
        keep = np.repeat(full, np.diff(offsets))
        all_hashes.append(hashes[keep])
        all_bench.append(np.full(int(keep.sum()), i, np.int64))
        names.append(path.name.removesuffix(".jsonl"))
    if not all_hashes:
        return EvalNgrams(np.zeros(0, np.uint64), np.zeros(0, np.int64), ())
    hashes, bench = np.concatenate(all_hashes), np.concatenate(all_bench)
    order = np.lexsort((bench, hashes))
    hashes, bench = hashes[order], bench[order]
    first = np.ones(hashes.size, bool)
    first[1:] = hashes[1:] != hashes[:-1]
    return EvalNgrams(hashes[first], bench[first], tuple(names))


def cut_text(text: str, hit_words: list[int], n: int, cut_chars: int, min_fragment_chars: int,
             max_splits: int) -> tuple[str | None, int]:
    """The text with `cut_chars` removed around each hit n-gram (starting at word index `hit_words`);
    `(None, splits)` when it is cut more than `max_splits` times or nothing long enough is left.
    lm-eval's Janitor rule, not its Janitor: it n-grams its own normalization as strings, and lm-eval needs datasets."""
    tokens = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    _, token_offsets = words_of_batch(pa.array([text[s:e] for s, e in tokens], pa.large_string()))
    word_token = np.repeat(np.arange(len(tokens)), np.diff(token_offsets))  # word i comes from token word_token[i]
    spans = []
    for w in sorted(hit_words):
        start = tokens[word_token[w]][0]
        end = tokens[word_token[min(w + n - 1, len(word_token) - 1)]][1]
        spans.append([max(0, start - cut_chars), min(len(text), end + cut_chars)])
    merged: list[list[int]] = []
    for span in spans:
        if merged and span[0] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], span[1])
        else:
            merged.append(span)
    if len(merged) > max_splits:
        return None, len(merged)
    fragments, at = [], 0
    for start, end in merged:
        fragments.append(text[at:start])
        at = end
    fragments.append(text[at:])
    kept = [f.strip() for f in fragments if len(f.strip()) >= min_fragment_chars]
    return ("\n".join(kept) if kept else None), len(merged)


def scan_batches(batches: Iterator[pa.RecordBatch], ngrams: EvalNgrams, cfg) -> Iterator[pa.RecordBatch]:
    """`mapInArrow` body: (doc_id, text) -> (doc_id, hits, benchmarks, text, drop_reason) for documents with
    a hit only; `text` is the cut text (action cut) or null."""
    for batch in batches:
        hashes, offsets, full = ngram_hashes(batch.column("text"), cfg.ngram)
        bench = ngrams.lookup(hashes)
        out = {"doc_id": [], "hits": [], "benchmarks": [], "text": [], "drop_reason": []}
        for i in np.flatnonzero(full):
            found = bench[offsets[i]:offsets[i + 1]]
            positions = np.flatnonzero(found >= 0)
            if positions.size == 0:
                continue
            text, reason = None, "contaminated"
            if cfg.action == "cut":
                text, splits = cut_text(batch.column("text")[i].as_py(), positions.tolist(), cfg.ngram,
                                        cfg.cut_chars, cfg.min_fragment_chars, cfg.max_splits)
                reason = None if text is not None else ("contaminated_too_many_splits" if splits > cfg.max_splits
                                                        else "contaminated_nothing_left")
            out["doc_id"].append(batch.column("doc_id")[i].as_py())
            out["hits"].append(int(positions.size))
            out["benchmarks"].append(sorted({ngrams.names[b] for b in found[positions]}))
            out["text"].append(text)
            out["drop_reason"].append(reason)
        yield pa.RecordBatch.from_pydict(out, schema=pa.schema([
            ("doc_id", pa.string()), ("hits", pa.int32()), ("benchmarks", pa.list_(pa.string())),
            ("text", pa.string()), ("drop_reason", pa.string())]))
