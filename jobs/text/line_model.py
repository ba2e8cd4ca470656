"""A learned line classifier over the extractors' lines: its candidates, features, labels and the kept text.

The standard move of boilerplate-removal research (boilerpipe's shallow text features, dragnet, Web2Text):
the candidates are the union of the lines of rs-trafilatura (the primary), resiliparse's main content and,
where the job runs it, trafilatura, in page order; each line gets cheap features (which extractors kept it,
its words, characters, punctuation / digit / uppercase shares, terminal punctuation, relative position, its
copies in the page, its share of the page's words, its likeness to the title, the page type, its neighbours
and the run it sits in); a gradient-boosted tree model (scikit-learn) says keep or drop, and the kept lines,
in page order, are the text.  Labels come from pages with known main text: a line is main text when at least
`LABEL_SHARE` of its `\\w+` tokens (or word n-grams) are in the page's ground truth (`line_labels`).

Not used by the extract job: cross-validated by domain on WCXB dev (bench/extraction_lines.py), it stays below
the job's rules on the six non-article types (best label: 0.747 word-F1 against 0.778; articles 0.944 against
0.947), far from the +0.02 that would justify it.  With the DOM features of jobs.text.dom_features beside these
(bench/extraction_dom.py) it reaches 0.953 / 0.757: better, still 0.02 under the rule on the mixed types, all of it
recall on collection and listing pages.  The code stays as the benches', for the next experiment (a page-level
objective, a sequence model over a page's blocks).
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from jobs.text.lines import words_of

PAGE_TYPES = ("article", "forum", "product", "collection", "listing", "documentation", "service")
LABEL_SHARE = 0.5
_WORD = re.compile(r"\w+")
_PUNCT = re.compile(r"[^\w\s]")
_DIGIT = re.compile(r"\d")
_TERMINAL = (".", "!", "?", ":", "\"", "”", "’", ")", "。")
_BULLET = ("•", "-", "*", "·", "–", "—", "»", "›", "|", "►", "▶", "✓", "✔")


@dataclass(frozen=True)
class Candidate:
    line: str
    key: str                # the line's lowercased words, space-joined (`words_of`)
    sources: tuple          # per extractor (primary first): does its text hold this line


def candidate_lines(texts: list[str]) -> list[Candidate]:
    """Every line of `texts[0]` (copies included, in order), then each other text's lines not already
    there, each placed after the last line of its own text that is already placed: the page's candidates.

    Hand-written, not difflib: an order-preserving union keyed on words is a few lines, and SequenceMatcher
    is quadratic on pages of thousands of lines.
    """
    n = len(texts)
    keys_of = [{words_of(line) for line in text.splitlines()} for text in texts]
    placed: list[tuple[str, str]] = [(line, words_of(line)) for line in texts[0].splitlines()]
    for text in texts[1:]:
        index = {}
        for i, (_, key) in enumerate(placed):
            index.setdefault(key, i)
        after, anchor, seen = defaultdict(list), -1, set()
        for line in text.splitlines():
            key = words_of(line)
            if key in index:
                anchor = index[key]
            elif key not in seen:
                seen.add(key)
                after[anchor].append((line, key))
        merged = list(after[-1])
        for i, item in enumerate(placed):
            merged += [item, *after[i]]
        placed = merged
    return [Candidate(line, key, tuple(key in keys_of[j] for j in range(n))) for line, key in placed]


FEATURES = (
    # which extractors hold it, and how much of its words each extractor's text holds
    "in_rs", "in_rp", "in_tf", "tf_ran", "cover_rs", "cover_rp", "cover_tf",
    # the line's own text
    "words", "log_words", "chars", "punct_share", "digit_share", "upper_share", "terminal", "bullet", "has_pipe",
    # its place in the page
    "rel_pos", "copy_index", "copies", "word_share", "title_sim", "title_in_line",
    # the page
    "page_lines", "log_page_words", "rs_over_rp", "log_rs_words", "log_rp_words",
    *(f"type_{t}" for t in PAGE_TYPES),
    # neighbours and the run of lines the primary keeps or drops around it
    "prev_in_rs", "next_in_rs", "prev_log_words", "next_log_words", "prev_terminal", "next_terminal",
    "run_len", "run_log_words", "run_rel",
)


def _share(pattern: re.Pattern, line: str) -> float:
    chars = len(line.replace(" ", ""))
    return len(pattern.findall(line)) / chars if chars else 0.0


def page_features(cands: list[Candidate], page_type: str | None, title: str | None, tf_ran: bool) -> np.ndarray:
    """One row of `FEATURES` per candidate line (float32)."""
    n = len(cands)
    out = np.zeros((n, len(FEATURES)), dtype=np.float32)
    if not n:
        return out
    tokens = [k.split() if k else [] for k in (c.key for c in cands)]
    word_counts = np.array([len(t) for t in tokens], dtype=np.float32)
    page_words = float(word_counts.sum()) or 1.0
    vocab = [set() for _ in cands[0].sources]
    source_words = [0.0] * len(cands[0].sources)
    for c, toks in zip(cands, tokens):
        for j, held in enumerate(c.sources):
            if held:
                vocab[j].update(toks)
                source_words[j] += len(toks)
    title_tokens = set(words_of(title or "").split())
    title_key = words_of(title or "")
    copies = Counter(c.key for c in cands)
    seen = Counter()
    in_rs = [c.sources[0] for c in cands]
    run_id, runs = [], []  # runs of consecutive lines the primary holds (or not)
    for i, flag in enumerate(in_rs):
        if i == 0 or flag != in_rs[i - 1]:
            runs.append([i, i])
        runs[-1][1] = i
        run_id.append(len(runs) - 1)
    run_words = [word_counts[a:b + 1].sum() for a, b in runs]
    rs_words, rp_words = source_words[0], source_words[1] if len(source_words) > 1 else 0.0
    type_row = [float(page_type == t) for t in PAGE_TYPES]
    for i, (c, toks) in enumerate(zip(cands, tokens)):
        w = len(toks)
        line = c.line.strip()
        letters = [ch for ch in line if ch.isalpha()]
        cover = [sum(t in v for t in toks) / w if w else 0.0 for v in vocab] + [0.0] * (3 - len(vocab))
        sources = list(c.sources) + [False] * (3 - len(c.sources))
        seen[c.key] += 1
        a, b = runs[run_id[i]]
        out[i] = (
            *map(float, sources), float(tf_ran), *cover,
            w, math.log1p(w), len(line), _share(_PUNCT, line), _share(_DIGIT, line),
            sum(ch.isupper() for ch in letters) / len(letters) if letters else 0.0,
            float(line.endswith(_TERMINAL)), float(line.startswith(_BULLET)), float("|" in line),
            i / n, seen[c.key], copies[c.key], w / page_words,
            sum(t in title_tokens for t in toks) / w if w else 0.0,
            float(bool(title_key) and title_key in c.key),
            math.log1p(n), math.log1p(page_words), rs_words / rp_words if rp_words else 10.0,
            math.log1p(rs_words), math.log1p(rp_words),
            *type_row,
            float(in_rs[i - 1]) if i else -1.0, float(in_rs[i + 1]) if i + 1 < n else -1.0,
            math.log1p(word_counts[i - 1]) if i else -1.0, math.log1p(word_counts[i + 1]) if i + 1 < n else -1.0,
            float(cands[i - 1].line.rstrip().endswith(_TERMINAL)) if i else -1.0,
            float(cands[i + 1].line.rstrip().endswith(_TERMINAL)) if i + 1 < n else -1.0,
            b - a + 1, math.log1p(run_words[run_id[i]]), (i - a) / (b - a + 1),
        )
    return out


def line_labels(cands: list[Candidate], reference: str, kind: str = "words") -> np.ndarray:
    """1 where at least `LABEL_SHARE` of the line's `\\w+` tokens (kind "words"), or of its word bigrams or
    trigrams (kinds "bigrams", "trigrams"; a shorter line: its whole run of words) are in `reference`
    (lowercased), else 0.  Kind "consumed" is "trigrams" with the truth's trigrams counted and used up in page
    order: a second copy of a line, or a near-copy that another extractor split differently, is labelled 0 once
    the truth's words are spent (the score counts every copy)."""
    consume = kind == "consumed"
    n = {"words": 1, "bigrams": 2, "trigrams": 3, "consumed": 3}[kind]
    words = _WORD.findall(reference.lower())
    truth = Counter(tuple(words[i:i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1))
    labels = np.zeros(len(cands), dtype=np.int8)
    for i, c in enumerate(cands):
        toks = c.key.split()
        k = min(n, len(toks))
        units = [tuple(toks[j:j + k]) for j in range(len(toks) - k + 1)] if toks else []
        if units and sum(truth[u] > 0 for u in units) >= LABEL_SHARE * len(units):
            labels[i] = 1
            if consume:
                truth.subtract(units)
    return labels


def assemble(cands: list[Candidate], keep: np.ndarray) -> str:
    """The kept lines, in page order."""
    return "\n".join(c.line for c, k in zip(cands, keep) if k)


def new_model(seed: int = 0):
    """The classifier: scikit-learn's histogram gradient boosting, small enough to load in milliseconds."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_iter=100, learning_rate=0.15, max_leaf_nodes=31,
                                          min_samples_leaf=40, l2_regularization=1.0, random_state=seed)

