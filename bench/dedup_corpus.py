"""Build a dedup evaluation corpus from real text, with known edits, and its brute-force true pairs.

    .venv/bin/python bench/dedup_corpus.py OUT_DIR [--bases 400] [--variants 3] [--unrelated 800] [--seed 7]

Real text: WCXB's hand-labelled main text of 1,497 real pages (../shared/data/extraction/wcxb_dev) and
English Wikipedia articles cut into ~800-word pieces (../shared/data/text/wiki_text).  Each *base* text
gets variants, each edited to a target word-5-gram Jaccard with its base (drawn around 0.8 on purpose:
0.99 ... 0.5) by one kind of edit, its size found by bisection on the measured Jaccard:
    delete     contiguous spans of words removed
    insert     spans of words from another real text inserted
    reorder    paragraphs/sentence blocks moved (plus deletions where moves alone cannot get that low)
    boilerplate  a real boilerplate block (cookie/consent/navigation text) added at the start or end
    mixed      deletions and insertions together
Unrelated texts are added as they are.  Then every pair of documents that shares a shingle gets its exact
Jaccard over word 5-grams of the normalized words (jobs.dedup.normalize.words_of; sets of word tuples,
no hashing): OUT_DIR/truth.jsonl lists every pair at J >= 0.5.  Writes corpus.jsonl ({id, text}),
truth.jsonl ({a, b, jaccard}), edits.jsonl (what was done to each variant).  Skips (exit 0) when
../shared/data is absent.
"""
from __future__ import annotations

import argparse
import glob
import json
import random
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
NGRAM = 5
TARGETS = (0.99, 0.95, 0.92, 0.9, 0.88, 0.86, 0.85, 0.84, 0.83, 0.82, 0.81, 0.8, 0.79, 0.78, 0.76, 0.74, 0.7, 0.6, 0.5)
EDITS = ("delete", "insert", "reorder", "boilerplate", "mixed")
BOILERPLATE = [
    "We use cookies to improve your experience on our site. By continuing to browse you agree to our use of cookies. "
    "Accept all cookies Manage preferences Privacy policy Terms of use",
    "Home About us Contact Blog Careers Press Sitemap Subscribe to our newsletter for the latest news and offers. "
    "Follow us on Facebook Twitter Instagram LinkedIn YouTube",
    "Share this article Print Email Related articles Most popular Read more Comments are closed. "
    "Copyright all rights reserved. Reproduction in whole or in part without permission is prohibited",
]


def real_texts() -> list[str]:
    texts = []
    for path in sorted(glob.glob(str(DATA / "extraction" / "wcxb_dev" / "dev" / "ground-truth" / "*.json"))):
        text = (json.loads(Path(path).read_text(encoding="utf-8")).get("ground_truth") or {}).get("main_content")
        if text and len(text.split()) >= 120:
            texts.append(text.strip())
    wiki = DATA / "text" / "wiki_text" / "enwiki_dump_excerpt" / "articles.plain.jsonl"
    for line in wiki.read_text(encoding="utf-8").splitlines():
        words = json.loads(line)["text"].split(" ")
        for i in range(0, len(words) - 400, 800):
            texts.append(" ".join(words[i:i + 800]))
    return texts


def shingles(text: str) -> frozenset:
    from jobs.dedup.normalize import words_of

    words = words_of(text)
    if not words:
        return frozenset()
    if len(words) < NGRAM:
        return frozenset([tuple(words)])
    return frozenset(tuple(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if (a or b) else 0.0


def edit(text: str, kind: str, k: int, rng: random.Random, donor: str) -> str:
    """`text` with an edit of size k (words, or moves for reorder) of the given kind."""
    words = text.split(" ")
    if kind in ("delete", "mixed"):
        spans = max(1, min(4, k // 20 + 1))
        for s in range(spans):
            size = k // spans if kind == "delete" else k // (2 * spans)
            if size and len(words) > size + 1:
                at = rng.randrange(0, len(words) - size)
                del words[at:at + size]
    if kind in ("insert", "mixed"):
        dwords = donor.split(" ")
        spans = max(1, min(4, k // 20 + 1))
        for s in range(spans):
            size = k // spans if kind == "insert" else k // (2 * spans)
            at, src = rng.randrange(0, len(words) + 1), rng.randrange(0, max(1, len(dwords) - size))
            words[at:at] = dwords[src:src + size]
    if kind == "reorder":
        blocks = [b for b in text.split("\n") if b.strip()]
        if len(blocks) < 4:  # one paragraph: cut it into sentence blocks
            blocks = [b for b in text.replace(". ", ".\n").split("\n") if b.strip()]
        for _ in range(k):
            if len(blocks) > 1:
                i, j = rng.randrange(len(blocks)), rng.randrange(len(blocks))
                blocks[i], blocks[j] = blocks[j], blocks[i]
        return "\n".join(blocks)
    if kind == "boilerplate":
        # the fixed blocks first, then "related articles" teasers from another real text to reach k words
        block = " ".join((" ".join(BOILERPLATE) + " " + donor).split(" ")[:k])
        return block + "\n" + text if rng.random() < 0.5 else text + "\n" + block
    return " ".join(words)


def variant(base: str, base_sh: frozenset, target: float, kind: str, rng: random.Random, donor: str):
    """Bisect the edit size so that J(variant, base) lands as close to `target` as the edit allows."""
    n = len(base.split(" "))
    lo, hi = 0, (len([b for b in base.replace(". ", ".\n").split("\n")]) * 3 if kind == "reorder" else 2 * n)
    best = None
    seed = rng.random()
    for _ in range(14):
        mid = (lo + hi) // 2
        text = edit(base, kind, mid, random.Random(seed), donor)
        j = jaccard(shingles(text), base_sh)
        if best is None or abs(j - target) < abs(best[1] - target):
            best = (text, j, mid)
        if j > target:
            lo = mid + 1
        else:
            hi = mid
        if lo >= hi:
            break
    return best


def true_pairs(sets: dict[str, frozenset], minimum: float) -> list[tuple[str, str, float]]:
    """Every pair at exact Jaccard >= minimum: pairs sharing no shingle have J = 0, so only pairs that share
    one are compared (an inverted index; every such pair is compared exactly)."""
    postings = defaultdict(list)
    for doc, sh in sets.items():
        for s in sh:
            postings[s].append(doc)
    seen, out = set(), []
    for docs in postings.values():
        if len(docs) < 2:
            continue
        for a, b in combinations(sorted(docs), 2):
            if (a, b) in seen:
                continue
            seen.add((a, b))
            j = jaccard(sets[a], sets[b])
            if j >= minimum:
                out.append((a, b, j))
    return sorted(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--bases", type=int, default=400)
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--unrelated", type=int, default=800)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent")
        return 0
    rng = random.Random(args.seed)
    texts = real_texts()
    rng.shuffle(texts)
    bases, unrelated = texts[:args.bases], texts[args.bases:args.bases + args.unrelated]
    donors = texts[args.bases + args.unrelated:] or unrelated
    corpus, edits = [], []
    for i, base in enumerate(bases):
        base_id = f"b{i:04d}"
        corpus.append((base_id, base))
        base_sh = shingles(base)
        for v in range(args.variants):
            target, kind = rng.choice(TARGETS), rng.choice(EDITS)
            text, j, size = variant(base, base_sh, target, kind, rng, rng.choice(donors))
            vid = f"{base_id}v{v}"
            corpus.append((vid, text))
            edits.append({"id": vid, "base": base_id, "edit": kind, "size": size, "target": target, "jaccard": round(j, 4)})
        if (i + 1) % 50 == 0:
            print(f"{i + 1}/{len(bases)} bases edited", file=sys.stderr)
    corpus += [(f"u{i:04d}", t) for i, t in enumerate(unrelated)]
    rng.shuffle(corpus)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for doc_id, text in corpus:
            f.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
    with open(out / "edits.jsonl", "w", encoding="utf-8") as f:
        for e in edits:
            f.write(json.dumps(e) + "\n")
    pairs = true_pairs({doc_id: shingles(text) for doc_id, text in corpus}, 0.5)
    with open(out / "truth.jsonl", "w", encoding="utf-8") as f:
        for a, b, j in pairs:
            f.write(json.dumps({"a": a, "b": b, "jaccard": round(j, 6)}) + "\n")
    at = sum(1 for p in pairs if p[2] >= 0.8)
    near = sum(1 for p in pairs if 0.8 <= p[2] < 0.85)
    print(f"{len(corpus)} documents ({len(bases)} bases x {args.variants} variants, {len(unrelated)} unrelated); "
          f"{len(pairs)} pairs at J >= 0.5, {at} at J >= 0.8 ({near} in 0.80-0.85); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
