"""Words -> shingle hashes -> MinHash signatures -> LSH band hashes, vectorized per batch (no Spark).

Words arrive hashed (`normalize.word_hashes_of_batch`: FNV-1a over each normalized word's UTF-8 bytes,
in one compiled scan); a word n-gram's hash combines its words' hashes with a splitmix64 mixer, in one
compiled pass over all positions of all documents.  Signatures come from rensa's `RMinHash` in one call per batch over the flat
shingle-hash buffer (no Python call per document or per hash).  A band's hash mixes its `rows` minhash
values into 64 bits.  Texts with fewer words than `n` get one shingle of all their words, so a short text
still matches its exact copies; a text with no words gets no shingle and no band.
"""
from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.dedup.normalize import _fnv_strings, _mix64

_MASK63 = np.uint64((1 << 63) - 1)
_COMBINE = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier (golden ratio): word order matters in a shingle

# the signature scheme: what a stored signature depends on besides the configured settings.  Bump it when
# the normalization, the word/shingle hashes or the signer change, so that the settings hash changes and
# old signatures and band tables are recomputed rather than mixed with new ones.
SCHEME = "words-fnv1a-scan/shingles-splitmix/rensa-rminhash"


def scheme() -> str:
    """SCHEME plus the signer's own algorithm version (a rensa upgrade that changes digests changes this)."""
    import rensa

    return f"{SCHEME}/v{rensa.RMinHash.ALGORITHM_VERSION}"


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64 that spreads every input bit over the output."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hash_strings(strings: pa.Array) -> np.ndarray:
    """A stable 64-bit hash of each string (same value in every process, run and machine): the word hash
    of `normalize.word_hashes_of_batch` (FNV-1a over the UTF-8 bytes, then splitmix64 with the length)."""
    strings = pa.array(strings, pa.large_string()) if not isinstance(strings, pa.Array) else strings
    strings = strings.cast(pa.large_string())
    if len(strings) == 0:
        return np.zeros(0, np.uint64)
    buffers = strings.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64, count=len(strings) + 1, offset=strings.offset * 8)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return _fnv_strings(data, np.ascontiguousarray(offsets))


def word_hashes(words: pa.Array) -> np.ndarray:
    """The hash of every word of a flat word array, hashing each distinct word once."""
    if len(words) == 0:
        return np.zeros(0, np.uint64)
    encoded = pc.dictionary_encode(words)
    return hash_strings(encoded.dictionary)[np.asarray(encoded.indices)]


@numba.njit(cache=True, nogil=True)
def _shingles(word_hash, offsets, n):
    """Hand-written (no library hashes n-grams of a hash array): one pass, see `shingle_hashes`."""
    n_texts = offsets.size - 1
    per_text = np.empty(n_texts, np.int64)
    for i in range(n_texts):
        length = offsets[i + 1] - offsets[i]
        per_text[i] = length - n + 1 if length >= n else (1 if length > 0 else 0)
    shingle_offsets = np.zeros(n_texts + 1, np.int64)
    for i in range(n_texts):
        shingle_offsets[i + 1] = shingle_offsets[i] + per_text[i]
    out = np.empty(shingle_offsets[n_texts], np.uint64)
    salt = np.uint64(n)
    for i in range(n_texts):
        first = offsets[i]
        length = offsets[i + 1] - first
        at = shingle_offsets[i]
        if length >= n:
            for p in range(length - n + 1):
                h = np.uint64(0)
                for k in range(n):
                    h = h * _COMBINE + word_hash[first + p + k]
                out[at + p] = _mix64(h + salt)
        elif length > 0:  # a short text: one shingle of all its words, as if padded with zero hashes
            h = np.uint64(0)
            for k in range(length):
                h = h * _COMBINE + word_hash[first + k]
            for k in range(n - length):
                h = h * _COMBINE
            out[at] = _mix64(h + salt)
    return out, shingle_offsets


def shingle_hashes(word_hash: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`(hashes, shingle_offsets)`: the hash of every word n-gram of every text, flat, text i's at
    `hashes[shingle_offsets[i]:shingle_offsets[i+1]]` in text order (repeats included: MinHash does not
    care; `unique_sets` makes the sets for exact Jaccard).  A text with fewer than n words has one shingle
    of all its words (so it matches its exact copies), a text with none has none."""
    return _shingles(np.ascontiguousarray(word_hash, np.uint64), np.ascontiguousarray(offsets, np.int64), int(n))


def unique_sets(shingles: np.ndarray, shingle_offsets: np.ndarray) -> list[np.ndarray]:
    """Each text's shingle hashes as a sorted set (exact Jaccard by `jaccard`)."""
    return [np.unique(shingles[shingle_offsets[i]:shingle_offsets[i + 1]]) for i in range(len(shingle_offsets) - 1)]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted sets of shingle hashes (0 when both are empty)."""
    if a.size == 0 and b.size == 0:
        return 0.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


def signatures(shingles: np.ndarray, shingle_offsets: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """MinHash signatures, one row of `num_perm` uint32 values per text (rensa `RMinHash`)."""
    import rensa

    if len(shingle_offsets) <= 1:
        return np.zeros((0, num_perm), np.uint32)
    matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
        np.ascontiguousarray(shingles, np.uint64), np.ascontiguousarray(shingle_offsets, np.uint64), num_perm, seed)
    return np.asarray(matrix.to_rows(), dtype=np.uint32).reshape(-1, num_perm)


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """`(n_texts, bands)` int64: band b's hash mixes minhash values b*rows .. b*rows+rows-1.
    Not datasketch's MinHashLSH: its band tables live in a dict or Redis, one insert per document, not Spark columns."""
    if bands * rows > sigs.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows need {bands * rows} permutations; the signatures have "
                         f"{sigs.shape[1]}: raise dedup.minhash.num_perm or lower bands/rows")
    banded = sigs[:, : bands * rows].reshape(sigs.shape[0], bands, rows).astype(np.uint64)
    h = np.zeros(banded.shape[:2], np.uint64)
    with np.errstate(over="ignore"):
        for r in range(rows):
            h = mix64(h * np.uint64(0x9E3779B97F4A7C15) + banded[:, :, r] + np.uint64(1))
    return (h & _MASK63).astype(np.int64)


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """P(two texts of Jaccard `similarity` share at least one band): 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - similarity ** rows) ** bands


def s_curve(bands: int, rows: int, points=(0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)) -> str:
    """The LSH S-curve as a small table a person can read in a log."""
    knee = (1.0 / bands) ** (1.0 / rows)
    lines = [f"LSH {bands} bands x {rows} rows: knee (1/b)^(1/r) = {knee:.3f}",
             "  Jaccard  P(candidate)  bar"]
    for s in points:
        p = candidate_probability(s, bands, rows)
        lines.append(f"  {s:7.2f}  {p:12.4f}  {'#' * round(p * 40)}")
    return "\n".join(lines)


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of equal minhash values: the signature's Jaccard estimate."""
    return float(np.mean(a == b)) if len(a) else 0.0


def false_negative_rate(threshold: float, bands: int, rows: int, steps: int = 200) -> float:
    """Mean P(missed) over Jaccard in [threshold, 1] (text-dedup's `optimal_param` integrand)."""
    xs = [threshold + (1 - threshold) * (i + 0.5) / steps for i in range(steps)]
    return sum(1 - candidate_probability(x, bands, rows) for x in xs) / steps


def main(argv=None) -> None:
    """`python -m jobs.dedup.minhash`: print the S-curve of the configured (or given) bands x rows."""
    import argparse

    from jobs.config import load_jobs_config

    parser = argparse.ArgumentParser(prog="jobs.dedup.minhash", description=main.__doc__)
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    cfg = load_jobs_config(args.override).dedup.minhash
    print(s_curve(cfg.bands, cfg.rows))
    print(f"mean P(miss) for J in [{cfg.threshold}, 1]: {false_negative_rate(cfg.threshold, cfg.bands, cfg.rows):.5f}; "
          f"P(miss) at J={cfg.threshold}: {1 - candidate_probability(cfg.threshold, cfg.bands, cfg.rows):.5f}")


if __name__ == "__main__":
    main()
