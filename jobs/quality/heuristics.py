"""Heuristic quality signals of one document: Gopher quality, Gopher repetition, C4 and FineWeb's own rules.

Ported from datatrove (`pipeline/filters/gopher_quality_filter.py`, `gopher_repetition_filter.py`,
`c4_filters.py`, `fineweb_quality_filter.py`), but as *signals*: each rule's measured value is returned as a
column and the thresholds live in conf (`quality.filters`), so a threshold changes without recomputing anything.
datatrove's filters are written as keep/drop decisions over its own Document type and return only the first
reason, so they cannot give us the values themselves: hence this port (same formulas, same order of checks).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# datatrove `utils/text.py` PUNCTUATION (a symbol-only "word" is not a word for Gopher)
PUNCTUATION = set("!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»"
                  + "".join(map(chr, (*range(0x2000, 0x2070), *range(0x20A0, 0x20D0)))))
PUNCTUATION_CHARS = "".join(sorted(PUNCTUATION))
# datatrove TERMINAL_PUNCTUATION, the common part: what a line of prose ends with in most scripts
TERMINAL_PUNCTUATION = tuple(".!?\"'”’»。！？…։؟۔।॥၊။።፧፨᙮᠃᠉‼‽⁇⁈⁉⸮。︒﹒﹗！．？｡")
GOPHER_STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
C4_END_PUNCTUATION = (".", "?", "!", '"', "'")
C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
C4_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
# word tokens: runs of word characters, or runs of other non-space characters (punctuation), like nltk's
# word_tokenize that datatrove calls; nltk/spaCy would need tokenizer data downloaded at run time
WORD = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]+")
# sentences for C4's count: a run ending in terminal punctuation (nltk's punkt needs downloaded data)
SENTENCE_END = re.compile(r"[.!?。！？]+(?=\s|$)")
PARAGRAPHS = re.compile(r"\n{2,}")
LINES = re.compile(r"\n+")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# what binary bytes decode to: C0/C1 controls (not tab/newline/return), private use, noncharacters, surrogates
UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff\ufffe\uffff"
                         "\U000f0000-\U0010ffff]")
LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class SignalParams:
    """How signals are measured (not thresholds): changing one recomputes the signals."""
    c4_max_word_length: int = 1000          # C4: a line with a longer "word" is dropped
    c4_min_words_per_line: int = 3          # C4: a line with fewer words is dropped
    c4_filter_no_terminal_punct: bool = False  # C4 drops lines without terminal punctuation; FineWeb turns it off
    fineweb_short_line_length: int = 30     # FineWeb: a line this short or shorter is "short"


def words_of(text: str) -> list[str]:
    return WORD.findall(text)


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """(duplicate elements, their characters): each element after its first occurrence."""
    unique: set[str] = set()
    dup_elements = dup_chars = 0
    for item in items:
        if item in unique:
            dup_elements += 1
            dup_chars += len(item)
        else:
            unique.add(item)
    return dup_elements, dup_chars


class WordGrams:
    """A document's word n-grams, numbered exactly: words get integer ids once, and each n-gram's id is the
    np.unique rank of (its (n-1)-gram's id, its last word's id), so the counts for n = 2..10 are integer sorts in
    numpy instead of a tuple of strings hashed per position per n (3.5x less time on real pages; the values of
    datatrove's formulas, unchanged, are checked against a plain port in the tests)."""

    def __init__(self, words: list[str]) -> None:
        vocab: dict[str, int] = {}
        n = len(words)
        self.ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), dtype=np.int64, count=n)
        self.vocab_size = max(1, len(vocab))
        self.chars = np.concatenate(([0], np.cumsum(np.fromiter(map(len, words), dtype=np.int64, count=n))))
        self._grams: dict[int, tuple] = {1: (self.ids, None, None)}

    def grams(self, n: int):
        """(the n-gram id at each position, each id's count, each id's first position), or None if under n words."""
        if len(self.ids) < n:
            return None
        if n not in self._grams:
            shorter = self.grams(n - 1)[0][:len(self.ids) - n + 1]
            _, first, at, counts = np.unique(shorter * self.vocab_size + self.ids[n - 1:], return_index=True,
                                             return_inverse=True, return_counts=True)
            self._grams[n] = (at.reshape(-1), counts, first)
        return self._grams[n]

    def gram_chars(self, start: int, n: int) -> int:
        """Characters of the words of the n-gram at `start`, without separators."""
        return int(self.chars[start + n] - self.chars[start])

    def top_chars(self, n: int) -> int:
        """Characters of the most frequent word n-gram (space-joined) times its count (Gopher's top n-gram share);
        of equally frequent ones, the first seen, as Counter.most_common(1) picks."""
        grams = self.grams(n)
        if grams is None:
            return 0
        _, counts, first = grams
        top = counts.max()
        start = int(first[counts == top].min())
        return (self.gram_chars(start, n) + n - 1) * int(top)

    def duplicated_chars(self, n: int) -> int:
        """Characters in word n-grams seen before, without double counting overlaps (datatrove find_all_duplicate:
        a walk that skips n words after a hit; only positions whose n-gram occurs twice or more can hit)."""
        grams = self.grams(n)
        if grams is None:
            return 0
        at, counts, _ = grams
        if len(counts) == len(at):   # no n-gram repeats (the common case for n >= 5): nothing to walk
            return 0
        gram_at = at.tolist()
        seen: set[int] = set()
        repeated = free = 0
        for idx in np.flatnonzero(counts[at] > 1).tolist():
            if idx < free:
                continue
            if gram_at[idx] in seen:
                repeated += self.gram_chars(idx, n)
                free = idx + n
            else:
                seen.add(gram_at[idx])
        return repeated


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def gopher_quality(text: str, words: list[str]) -> dict:
    non_symbol = [w for w in words if w.strip(PUNCTUATION_CHARS)]   # a word not made only of punctuation
    n_words = len(words)
    lines = text.splitlines()
    return {
        "n_words": n_words,
        "n_non_symbol_words": len(non_symbol),
        "mean_word_length": (sum(map(len, non_symbol)) / len(non_symbol)) if non_symbol else 0.0,
        "hash_word_ratio": _ratio(text.count("#"), n_words),
        "ellipsis_word_ratio": _ratio(text.count("...") + text.count("…"), n_words),
        "bullet_lines_frac": _ratio(sum(ln.lstrip().startswith(("•", "-")) for ln in lines), len(lines)),
        "ellipsis_lines_frac": _ratio(sum(ln.rstrip().endswith(("...", "…")) for ln in lines), len(lines)),
        "alpha_words_frac": _ratio(sum(1 for w in words if LETTER.search(w)), n_words),
        "stop_words": sum(w.lower() in GOPHER_STOP_WORDS for w in words),
    }


def gopher_repetition(text: str, words: list[str]) -> dict:
    n_chars = len(text)
    paragraphs = PARAGRAPHS.split(text.strip())
    para_dup, para_chars = find_duplicates(paragraphs)
    lines = LINES.split(text)
    line_dup, line_chars = find_duplicates(lines)
    out = {"dup_para_frac": _ratio(para_dup, len(paragraphs)), "dup_para_char_frac": _ratio(para_chars, n_chars),
           "dup_line_frac": _ratio(line_dup, len(lines)), "dup_line_char_frac": _ratio(line_chars, n_chars)}
    grams = WordGrams(words)
    for n in (2, 3, 4):
        out[f"top_{n}_gram_char_frac"] = _ratio(grams.top_chars(n), n_chars)
    for n in range(5, 11):
        out[f"dup_{n}_gram_char_frac"] = _ratio(grams.duplicated_chars(n), n_chars)
    return out


@dataclass(frozen=True)
class LineRemoval:
    """C4's line-level edit of the text written to silver.quality (`quality.c4_line_removal`); datatrove
    C4QualityFilter's defaults.  It edits text only: no signal depends on it."""
    enabled: bool = False
    remove_citations: bool = True           # "[1]", "[edit]", "[citation needed]" cut out of kept lines
    filter_no_terminal_punct: bool = True   # a line must end in . ? ! " ' (and not in "...")
    min_words_per_line: int = 3             # -1: off
    max_word_length: int = 1000             # a line with a longer word goes; -1: off
    filter_javascript: bool = True          # a line mentioning "javascript" goes
    filter_policy: bool = True              # a line with a cookie/terms-of-use phrase goes


def _c4_line(line: str, max_word_length: int, no_terminal_punct: bool, min_words: int,
             citations: bool = True) -> tuple[str | None, list[str]]:
    """(the line as C4 keeps it, or None when a length/punctuation rule drops it; its words), in datatrove's order."""
    line = line.strip()
    words = line.split()
    if max_word_length >= 0 and any(len(w) > max_word_length for w in words):
        return None, words
    if citations:
        line = C4_CITATION.sub("", line)
    if no_terminal_punct and (not line.endswith(C4_END_PUNCTUATION) or line.endswith("...")):
        return None, words
    if len(words) < min_words:
        return None, words
    return line, words


def c4(text: str, params: SignalParams) -> dict:
    """C4's line rules as measurements: lines that survive, sentences in them, the two whole-document flags."""
    lines = text.splitlines()
    kept = sentences = 0
    lorem = curly = False
    for raw in lines:
        line, _ = _c4_line(raw, params.c4_max_word_length, params.c4_filter_no_terminal_punct,
                           params.c4_min_words_per_line)
        if line is None:
            continue
        lower = line.lower()
        lorem = lorem or "lorem ipsum" in lower
        curly = curly or "{" in line
        if "javascript" in lower or any(p in lower for p in C4_POLICY):
            continue
        sentences += max(1, len(SENTENCE_END.findall(line)) + (0 if SENTENCE_END.search(line[-1:] or " ") else 1))
        kept += 1
    return {"c4_lines_kept_frac": _ratio(kept, len(lines)), "c4_sentences": sentences,
            "c4_lorem_ipsum": int(lorem), "c4_curly_bracket": int(curly)}


def c4_remove_lines(text: str | None, rules: LineRemoval) -> tuple[str, int, int]:
    """datatrove C4QualityFilter's text edit: `(kept lines joined by newlines, lines removed, characters removed)`.

    Lorem ipsum and curly brackets drop the whole document in C4: they stay filters over the signals."""
    text = text or ""
    lines = text.splitlines()
    kept = []
    for raw in lines:
        line, _ = _c4_line(raw, rules.max_word_length, rules.filter_no_terminal_punct, rules.min_words_per_line,
                           rules.remove_citations)
        if line is None:
            continue
        lower = line.lower()
        if (rules.filter_javascript and "javascript" in lower) or (
                rules.filter_policy and any(p in lower for p in C4_POLICY)):
            continue
        kept.append(line)
    edited = "\n".join(kept).strip()
    return edited, len(lines) - len(kept), len(text) - len(edited)


def fineweb(text: str, words: list[str], params: SignalParams) -> dict:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return {
        "fw_line_punct_frac": _ratio(sum(ln.endswith(TERMINAL_PUNCTUATION) for ln in lines), len(lines)),
        "fw_short_line_frac": _ratio(sum(len(ln) <= params.fineweb_short_line_length for ln in lines), len(lines)),
        "fw_dup_line_char_frac": _ratio(find_duplicates(lines)[1], len(text.replace("\n", ""))),
        "fw_newline_word_ratio": _ratio(text.count("\n"), len(words)),
    }


def bad_input(text: str) -> dict:
    """Junk that extraction let through: mojibake (U+FFFD from undecodable bytes), binary control characters."""
    n = len(text)
    return {"n_chars": n, "replacement_char_frac": _ratio(text.count("\ufffd"), n),
            "control_char_frac": _ratio(len(CONTROL.findall(text)), n),
            "unprintable_frac": _ratio(len(UNPRINTABLE.findall(text)), n)}


def signals(text: str | None, params: SignalParams = SignalParams()) -> dict:
    """Every heuristic signal of one document (see COLUMNS); an empty or missing text gives zeros."""
    text = text or ""
    words = words_of(text)
    return {**bad_input(text), **gopher_quality(text, words), **gopher_repetition(text, words),
            **c4(text, params), **fineweb(text, words, params)}


_INT_COLUMNS = {"n_chars", "n_words", "n_non_symbol_words", "stop_words", "c4_sentences", "c4_lorem_ipsum",
                "c4_curly_bracket"}
COLUMNS: dict[str, str] = {name: ("int" if name in _INT_COLUMNS else "double") for name in signals("a b.")}
