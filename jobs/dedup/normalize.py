"""Text -> normalized words -> word hashes, in one compiled pass per Arrow batch (pure functions; no Spark).

The normalization FineWeb and cc_net use for dedup: Unicode NFKD with combining marks dropped
(accents removed), lowercase, every decimal digit folded to 0, punctuation and symbols turned into
spaces.  Scripts written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar) get one word per
character, so a Chinese or Japanese document shingles into character n-grams instead of collapsing
into one giant "word".  Every step is local to a whitespace-separated token, so the words of a text are
the concatenation of the words of its tokens (`contamination` relies on this to map hits back to
characters).

How it is fast: the whole normalization of one character is a lookup in a table over all code points
(NFKD without marks, lowercase, digit fold, separator, one-character word), built once per process
with Arrow's own Unicode functions, and one numba-compiled scan over the UTF-8 bytes of the whole batch
cuts the words and hashes them (FNV-1a over each normalized word's UTF-8 bytes, then splitmix64): no
Python object per word or per character.  A character that decomposes into several (ligature, ellipsis,
fraction, Hangul syllable) expands through a second small table.  `normalize_texts` is the same normalization
written as Arrow regexes: the reference the tests hold the scan to.
"""
from __future__ import annotations

import functools
import hashlib

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# scripts without word separators: one word per character
_NO_SPACE_SCRIPTS = r"([\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}])"
_SEPARATORS = r"[\p{P}\p{S}\p{Cc}\p{Cf}\p{Z}]"

_SEP = np.int32(-1)          # table value: the code point ends a word (punctuation, symbol, control, space)
_DROP = np.int32(-2)         # a combining mark (after NFKD: an accent): removed, the word goes on
_SOLO = np.int32(1 << 30)    # flag on a code point that is a word by itself (scripts without spaces)
_EXPAND = np.int32(1 << 29)  # flag: the character normalizes to several (a text holding one is NFKD'ed first)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def normalize_texts(texts: pa.Array) -> pa.Array:
    """The normalized form of each text (null stays null); words are separated by runs of spaces.

    The reference definition in Arrow regexes (slow: RE2 with Unicode classes); `word_hashes_of_batch` and
    `words_of_batch` compute the same words with the code-point table."""
    x = pc.utf8_normalize(texts, "NFKD")
    x = pc.replace_substring_regex(x, r"\p{Mn}+", "")
    x = pc.utf8_lower(x)
    x = pc.replace_substring_regex(x, r"\p{Nd}", "0")
    # one pass: punctuation/symbols -> space (group 1 empty), a no-space-script character -> " char "
    return pc.replace_substring_regex(x, _NO_SPACE_SCRIPTS + r"|[\p{P}\p{S}\p{Cc}\p{Cf}]+", r" \1 ")


def _classify(x: pa.Array) -> np.ndarray:
    """Table values of single normalized characters: the code point, `_SOLO`-flagged or `_SEP`."""
    _, raw = _string_buffers(x.cast(pa.large_string()))
    out = np.frombuffer(raw.tobytes().decode("utf-8").encode("utf-32-le"), np.uint32).astype(np.int64)
    out[np.asarray(pc.match_substring_regex(x, "^" + _NO_SPACE_SCRIPTS + "$"))] |= int(_SOLO)
    out[np.asarray(pc.match_substring_regex(x, "^" + _SEPARATORS + "$"))] = _SEP
    return out


@functools.lru_cache(maxsize=1)
def codepoint_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_build_codepoint_table()`, kept in a file beside numba's cache so that each new Spark Python worker
    loads it in milliseconds instead of rebuilding it (seconds; a stage's workers start afresh after a minute
    idle).  Keyed by pyarrow's version (its Unicode tables) and this module's source; hand-written because
    no library caches a numpy result across processes with that key, and a failed write only costs a rebuild."""
    import os

    with open(__file__, "rb") as f:
        key = hashlib.sha256(f.read() + pa.__version__.encode()).hexdigest()[:16]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", f"codepoints-{key}.npz")
    try:
        with np.load(path) as cached:
            return cached["table"], cached["expansion_offsets"], cached["expansions"]
    except (OSError, KeyError, ValueError):
        pass
    table, expansion_offsets, expansions = _build_codepoint_table()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, table=table, expansion_offsets=expansion_offsets, expansions=expansions)
        os.replace(tmp, path)  # atomic: parallel workers never read a half-written file
    except OSError:
        pass
    return table, expansion_offsets, expansions


def _build_codepoint_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(table, expansion_offsets, expansions)`: `normalize_texts` applied to each code point alone.

    table[cp] (int32): a single word character -> its code point (with `_SOLO` set for a character that
    is a word alone); a separator -> `_SEP`; nothing (a combining mark) -> `_DROP`; several characters
    (ligature, ellipsis, ½, ™, a Hangul syllable) -> `_EXPAND` | j, whose values are
    expansions[expansion_offsets[j]:expansion_offsets[j+1]].  Exact, because NFKD decomposes each
    character on its own (its reordering only moves combining marks, which are dropped).  Built once per
    process with Arrow's own Unicode functions (about a second)."""
    cps = np.arange(0x110000, dtype=np.int64)
    valid = (cps < 0xD800) | (cps > 0xDFFF)  # surrogates never occur in UTF-8
    points = cps[valid]
    sizes = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)  # UTF-8 bytes per code point
    char_offsets = np.zeros(points.size + 1, np.int64)
    np.cumsum(sizes, out=char_offsets[1:])
    data = "".join(map(chr, points.tolist())).encode("utf-8")
    x = pa.LargeStringArray.from_buffers(points.size, pa.py_buffer(char_offsets), pa.py_buffer(data))
    x = pc.utf8_normalize(x, "NFKD")
    x = pc.replace_substring_regex(x, r"\p{Mn}+", "")
    x = pc.utf8_lower(x)
    x = pc.replace_substring_regex(x, r"\p{Nd}", "0")
    length = np.asarray(pc.utf8_length(x))
    out = np.full(points.size, _DROP, np.int64)
    out[length == 1] = _classify(x.filter(pa.array(length == 1)))
    several = np.flatnonzero(length > 1)
    chars = [c for s in x.take(pa.array(several)).to_pylist() for c in s]
    expansions = _classify(pa.array(chars, pa.large_string())) if chars else np.zeros(0, np.int64)
    expansion_offsets = np.zeros(several.size + 1, np.int64)
    np.cumsum(length[several], out=expansion_offsets[1:])
    out[several] = int(_EXPAND) | np.arange(several.size)
    table = np.full(cps.size, _SEP, np.int64)
    table[valid] = out
    return table.astype(np.int32), expansion_offsets, expansions.astype(np.int32)


@numba.njit(cache=True, nogil=True)
def _mix64(x):
    """splitmix64's finalizer: a bijection of uint64 that spreads every input bit over the output."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _scan(data, offsets, table, expansion_offsets, expansions, keep_text, max_words, max_bytes):
    """Hand-written because no library cuts and hashes normalized words without a Python object per
    word: one pass over the UTF-8 bytes of every text, a table lookup per code point.  Returns (done,
    word hashes, words per text, normalized UTF-8 bytes of the words back to back, word end offsets in
    those bytes); the bytes and ends only with keep_text.  Gives up (done = False) when the texts hold
    more than `max_words` words or `max_bytes` normalized bytes: the caller retries larger.  Everything
    is inline in one loop: a helper call per character costs more than the character's work."""
    n_docs = offsets.size - 1
    hashes = np.empty(max_words, np.uint64)
    counts = np.zeros(n_docs, np.int64)
    out = np.empty(max_bytes if keep_text else 0, np.uint8)
    word_ends = np.empty(max_words if keep_text else 0, np.int64)
    k = 0
    o = 0
    for d in range(n_docs):
        i = offsets[d]
        end = offsets[d + 1]
        k0 = k
        h = _FNV_OFFSET
        wlen = 0
        x = 0        # pending characters of an expansion: expansions[x:x_end]
        x_end = 0
        prev_solo = False
        while True:
            last = False
            if x < x_end:
                v = np.int64(expansions[x])
                x += 1
            elif i < end:
                b0 = np.int64(data[i])
                if b0 < 0x80:
                    cp = b0
                    i += 1
                else:  # a multi-byte character; anything invalid (a cut character, stray bytes) is one
                    # replacement character (a separator) per bad byte, and nothing outside the text is read
                    size = 2 if 0xC2 <= b0 < 0xE0 else 3 if 0xE0 <= b0 < 0xF0 else 4 if 0xF0 <= b0 < 0xF5 else 0
                    cp = b0 & (0x1F if size == 2 else 0x0F if size == 3 else 0x07)
                    ok = size > 0 and i + size <= end
                    for e in range(1, size if ok else 0):
                        nxt = np.int64(data[i + e])
                        if (nxt & 0xC0) != 0x80:
                            ok = False
                            break
                        cp = (cp << 6) | (nxt & 0x3F)
                    if ok and cp <= 0x10FFFF:
                        i += size
                    else:
                        cp = 0xFFFD
                        i += 1
                v = np.int64(table[cp])
                if v == -2:  # a combining mark: dropped
                    continue
                if v >= 0 and (v & (1 << 29)) != 0:  # several characters: take them one by one
                    j = v & ((1 << 29) - 1)
                    x = expansion_offsets[j]
                    x_end = expansion_offsets[j + 1]
                    continue
            else:
                v = -1
                last = True
            solo = v >= 0 and (v & (1 << 30)) != 0
            if v == -1 or solo or prev_solo:  # the current word (if any) ends before this character
                if wlen > 0:
                    if k >= max_words:
                        return False, hashes, counts, out, word_ends
                    hashes[k] = _mix64(h ^ np.uint64(wlen))
                    if keep_text:
                        word_ends[k] = o
                    k += 1
                    h = _FNV_OFFSET
                    wlen = 0
                prev_solo = solo
                if v == -1:
                    if last:
                        break
                    continue
            c = v & ((1 << 21) - 1)
            if c < 0x80:  # the common case: one byte
                h = (h ^ np.uint64(c)) * _FNV_PRIME
                m = 1
                if keep_text:
                    if o >= max_bytes:
                        return False, hashes, counts, out, word_ends
                    out[o] = c
                    o += 1
            else:
                m = 2 if c < 0x800 else 3 if c < 0x10000 else 4
                if keep_text and o + m > max_bytes:
                    return False, hashes, counts, out, word_ends
                for e in range(m):
                    if e == 0:
                        byte = (0xC0 if m == 2 else 0xE0 if m == 3 else 0xF0) | (c >> (6 * (m - 1)))
                    else:
                        byte = 0x80 | ((c >> (6 * (m - 1 - e))) & 0x3F)
                    h = (h ^ np.uint64(byte)) * _FNV_PRIME
                    if keep_text:
                        out[o] = byte
                        o += 1
            wlen += m
        counts[d] = k - k0
    return True, hashes[:k].copy(), counts, out[:o].copy(), word_ends[:k].copy()


@numba.njit(cache=True, nogil=True)
def _fnv_strings(data, offsets):
    """The word hash of `_scan` for strings that are already normalized words."""
    n = offsets.size - 1
    out = np.empty(n, np.uint64)
    for w in range(n):
        h = _FNV_OFFSET
        for i in range(offsets[w], offsets[w + 1]):
            h = (h ^ np.uint64(data[i])) * _FNV_PRIME
        out[w] = _mix64(h ^ np.uint64(offsets[w + 1] - offsets[w]))
    return out


def _string_buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """`(offsets, data)` of a large_string array, offsets rebased to start at 0."""
    buffers = texts.buffers()
    offsets = np.frombuffer(buffers[1], np.int64, count=len(texts) + 1, offset=texts.offset * 8)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data[offsets[0]:offsets[-1]]


def _as_large_strings(texts) -> pa.Array:
    texts = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.large_string())
    return pc.fill_null(texts.cast(pa.large_string()), "")


def _scan_batch(texts, keep_text: bool):
    """`_scan` over a batch (nulls as empty texts): (hashes, word offsets per text, bytes, word ends)."""
    offsets, data = _string_buffers(_as_large_strings(texts))
    # sized for typical text (a word and its separator take 2+ bytes); CJK and expansions can need more
    max_words, max_bytes = data.size // 2 + len(offsets) + 16, data.size + 16
    while True:
        done, hashes, counts, out, ends = _scan(data, offsets, *codepoint_table(), keep_text, max_words, max_bytes)
        if done:
            break
        max_words, max_bytes = 4 * max_words, 4 * max_bytes
    word_offsets = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=word_offsets[1:])
    return hashes, word_offsets, out, ends


def word_hashes_of_batch(texts) -> tuple[np.ndarray, np.ndarray]:
    """`(hashes, offsets)`: the 64-bit hash of every normalized word of every text, text i's at
    `hashes[offsets[i]:offsets[i+1]]` (equal to `word_hashes(words_of_batch(texts)[0])`, without strings)."""
    hashes, word_offsets, _, _ = _scan_batch(texts, False)
    return hashes, word_offsets


def words_of_batch(texts) -> tuple[pa.Array, np.ndarray]:
    """`(words, offsets)`: every word of every text as one flat string array, and text i's words at
    `words[offsets[i]:offsets[i+1]]` (a null or empty text has none)."""
    _, word_offsets, out, ends = _scan_batch(texts, True)
    word_starts = np.zeros(ends.size + 1, np.int64)
    word_starts[1:] = ends
    # Arrow's string kernels read whole words past the last byte: give the buffer Arrow's 64-byte padding
    padded = np.zeros(out.size + 64, np.uint8)
    padded[:out.size] = out
    words = pa.LargeStringArray.from_buffers(ends.size, pa.py_buffer(word_starts), pa.py_buffer(padded))
    return words, word_offsets


def words_of(text: str) -> list[str]:
    """The normalized words of one text (tests, the brute-force evaluator, contamination cuts)."""
    words, _ = words_of_batch(pa.array([text], pa.large_string()))
    return words.to_pylist()


def normalized_text(text: str) -> str:
    """The text exact dedup compares: its normalized words joined by single spaces."""
    return " ".join(words_of(text))


def hash_keys(hashes: np.ndarray, offsets: np.ndarray) -> list[str | None]:
    """Exact-dedup key of each text from its word hashes (blake2b-128 of their bytes, one C call per text,
    no strings); None for no words.  Two texts share a key when their normalized words are the same."""
    raw = np.ascontiguousarray(hashes, np.uint64).view(np.uint8)
    return [hashlib.blake2b(raw[8 * a:8 * b], digest_size=16).hexdigest() if b > a else None
            for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
