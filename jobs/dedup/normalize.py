"""Text -> normalized words, vectorized over an Arrow array (pure functions; no Spark).

The normalization FineWeb and cc_net use for dedup: Unicode NFKD with combining marks dropped
(accents removed), lowercase, every decimal digit folded to 0, punctuation and symbols turned into
spaces.  Scripts written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar) get one word per
character, so a Chinese or Japanese document shingles into character n-grams instead of collapsing
into one giant "word".  Every step is local to a whitespace-separated token, so the words of a text are
the concatenation of the words of its tokens (`contamination` relies on this to map hits back to
characters).
"""
from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# scripts without word separators: one word per character
_NO_SPACE_SCRIPTS = r"([\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}])"


def normalize_texts(texts: pa.Array) -> pa.Array:
    """The normalized form of each text (null stays null); words are separated by runs of spaces."""
    x = pc.utf8_normalize(texts, "NFKD")
    x = pc.replace_substring_regex(x, r"\p{Mn}+", "")
    x = pc.utf8_lower(x)
    x = pc.replace_substring_regex(x, r"\p{Nd}", "0")
    # one pass: punctuation/symbols -> space (group 1 empty), a no-space-script character -> " char "
    return pc.replace_substring_regex(x, _NO_SPACE_SCRIPTS + r"|[\p{P}\p{S}\p{Cc}\p{Cf}]+", r" \1 ")


def _byte_table() -> np.ndarray:
    """Byte -> byte: what `normalize_texts` does to an ASCII byte (letters lowered, digits to 0, the rest
    a space); bytes of multi-byte UTF-8 characters pass unchanged."""
    table = np.arange(256, dtype=np.uint8)
    for c in range(128):
        ch = chr(c)
        table[c] = ord(ch.lower()) if ch.isalpha() else ord("0") if ch.isdigit() else ord(" ")
    return table


_BYTES = _byte_table()


def _string_buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """`(offsets, data)` of a large_string array, offsets rebased to start at 0."""
    buffers = texts.buffers()
    offsets = np.frombuffer(buffers[1], np.int64, count=len(texts) + 1, offset=texts.offset * 8)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets - offsets[0], data[offsets[0]:offsets[-1]]


def _ascii_tokens(offsets: np.ndarray, data: np.ndarray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """`(tokens, parents, unicode)`: the byte table applied, texts cut at ASCII spaces, in numpy.

    A token is a maximal run of non-space bytes inside one text; `parents` names its text, `unicode` says
    it still holds non-ASCII bytes (those take the Unicode path).  Cutting only at ASCII spaces keeps
    multi-byte UTF-8 characters whole, so the tokens are valid UTF-8.
    """
    mapped = _BYTES[data]
    is_word = mapped != ord(" ")
    n = data.size
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    before = np.zeros(n, bool)
    before[1:] = is_word[:-1]
    before[offsets[nonempty]] = False          # a text's first byte starts a token
    after = np.zeros(n, bool)
    after[:-1] = is_word[1:]
    after[offsets[nonempty + 1] - 1] = False   # and its last byte ends one
    starts = np.flatnonzero(is_word & ~before)
    ends = np.flatnonzero(is_word & ~after) + 1
    token_offsets = np.zeros(starts.size + 1, np.int64)
    np.cumsum(ends - starts, out=token_offsets[1:])
    # Arrow's string kernels read whole words past the last byte (its own buffers are padded to 64 bytes);
    # an unpadded numpy buffer there gives the last word of a batch random trailing bytes
    packed = np.zeros(int(token_offsets[-1]) + 64, np.uint8)
    packed[:token_offsets[-1]] = mapped[is_word]
    tokens = pa.LargeStringArray.from_buffers(starts.size, pa.py_buffer(token_offsets), pa.py_buffer(packed))
    parents = np.searchsorted(offsets, starts, side="right") - 1
    unicode = np.zeros(starts.size, bool)
    high = np.flatnonzero(data >= 128)  # bytes of non-ASCII characters: never spaces, so inside a token
    if high.size:
        unicode[np.searchsorted(starts, high, side="right") - 1] = True
    return tokens, parents, unicode


def words_of_batch(texts) -> tuple[pa.Array, np.ndarray]:
    """`(words, offsets)`: every word of every text as one flat string array, and text i's words at
    `words[offsets[i]:offsets[i+1]]` (a null or empty text has none).

    Same words as splitting `normalize_texts(texts)` on whitespace, faster: the ASCII bytes go through
    one byte-table lookup, and only the tokens that still hold non-ASCII characters (a few per page in
    Latin-script text) take the Unicode path, which is valid because normalization is token-local.
    """
    texts = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.large_string())
    texts = pc.fill_null(texts.cast(pa.large_string()), "")
    offsets, data = _string_buffers(texts)
    tokens, parents, unicode_tokens = _ascii_tokens(offsets, data)
    if unicode_tokens.any():
        # trimmed first: Arrow 26's split sometimes returns a trailing run of spaces as a word
        resplit = pc.utf8_split_whitespace(pc.utf8_trim_whitespace(normalize_texts(tokens.filter(pa.array(unicode_tokens)))))
        counts = np.ones(len(tokens), np.int64)
        counts[unicode_tokens] = np.diff(np.asarray(resplit.offsets))
        first = np.zeros(len(tokens) + 1, np.int64)
        np.cumsum(counts, out=first[1:])
        inner = pc.list_flatten(resplit)
        inner_token = np.flatnonzero(unicode_tokens)[np.asarray(pc.list_parent_indices(resplit))]
        inner_rank = np.arange(len(inner)) - np.asarray(resplit.offsets)[:-1][np.asarray(pc.list_parent_indices(resplit))]
        position = np.empty(int(first[-1]), np.int64)
        ascii_idx = np.flatnonzero(~unicode_tokens)
        position[first[ascii_idx]] = np.arange(ascii_idx.size)
        position[first[inner_token] + inner_rank] = ascii_idx.size + np.arange(len(inner))
        tokens = pa.concat_arrays([tokens.filter(pa.array(~unicode_tokens)), inner.cast(tokens.type)]).take(pa.array(position))
        parents = np.repeat(parents, counts)
    keep = np.asarray(pc.greater(pc.utf8_length(tokens), 0))
    word_counts = np.bincount(parents[keep], minlength=len(texts))
    word_offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(word_counts, out=word_offsets[1:])
    return tokens.filter(pa.array(keep)), word_offsets


def words_of(text: str) -> list[str]:
    """The normalized words of one text (tests, the brute-force evaluator, contamination cuts)."""
    words, _ = words_of_batch(pa.array([text], pa.large_string()))
    return words.to_pylist()


def normalized_text(text: str) -> str:
    """The text exact dedup compares: its normalized words joined by single spaces."""
    return " ".join(words_of(text))


def text_keys(words: pa.Array, offsets: np.ndarray) -> list[str | None]:
    """Exact-dedup key of each text: blake2b-128 of its normalized words joined by spaces; None for no words."""
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), words),
                            pa.scalar(" ", words.type))
    return [hashlib.blake2b(t.encode(), digest_size=16).hexdigest() if t else None
            for t in joined.to_pylist()]
