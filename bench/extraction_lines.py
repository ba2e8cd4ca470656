"""Benchmark: a learned line classifier (jobs.text.line_model) against the job's rule, cross-validated by domain.

    .venv/bin/python bench/extraction_lines.py [--limit N] [--folds 5]

Over the cached voter outputs of bench/extraction_units.py (var/bench/extraction_units.pkl; built there on
first use), each WCXB dev page (never the held-out test split) becomes candidate lines: the union of
rs-trafilatura's (hinted) lines, resiliparse's and, where the job runs it (`choose_text`'s condition),
trafilatura's, in page order, with `line_model.FEATURES`.  Pages are split into folds grouped by domain
(scikit-learn's GroupKFold on the URL's host without `www.`): a domain's pages are never both trained on and
scored.  Per fold the model is trained on the other folds' lines (weighted by their words: the score counts
words), the keep threshold is fixed beforehand at 0.5 (`--threshold`; `--inner` chooses it per fold by an inner
grouped 3-fold split of the training pages, four times the fits), and the test pages' kept lines are scored with WCXB's own word F1 (`extract.min_chars`
applied), beside the job's current rule on the same pages.  Printed: P/R/F1 per type for the job, the model
on every page, and the model on all but articles (the job's rule there), the thresholds chosen, and the F1
the pooled out-of-fold predictions give at fixed thresholds.  `--label` picks what "main text" means for a
line (jobs.text.line_model.line_labels); "the labels themselves" is the F1 of keeping exactly the lines so
labelled: the ceiling of any classifier over these candidates and labels.

Measured (2026-11-27, WCXB dev 1,497 pages, 1,296 domains, 203,498 candidate lines; 5 folds; threshold 0.5
fixed beforehand; word F1 articles / mixed = the six other types, P = precision):

| label | labels' ceiling | line model, every page | model, the job's rule on articles | labelled keep |
|---|---|---|---|---|
| words (half the line's words in the truth) | 0.918 / 0.789 | 0.902 / 0.706 (P 0.849 / 0.658) | 0.945 / 0.711 | 84 % |
| bigrams | 0.958 / 0.843 | 0.918 / 0.718 (P 0.887 / 0.691) | 0.946 / 0.721 | 72 % |
| trigrams | 0.962 / 0.848 | (not run: its ceiling is already below the goal) | | 71 % |
| trigrams consumed in page order | 0.990 / 0.919 (P 0.991 / 0.960) | 0.944 / 0.747 (P 0.939 / 0.784) | 0.946 / 0.749 | 61 % |
| the job's rule (no model) | | 0.947 / 0.778 (P 0.929 / 0.776) | | |

Per type with the consumed labels, model / job: forum 0.786 / 0.783, product 0.670 / 0.684, collection
0.591 / 0.706, listing 0.659 / 0.721, documentation 0.927 / 0.939, service 0.842 / 0.840.  Over the pooled
out-of-fold predictions the best fixed threshold (0.3, chosen after looking, so optimistic) gives 0.943 /
0.764.  No-go (the bar: mixed +0.02 with articles no worse): the model gains precision on mixed pages (0.784 vs
0.776) but loses more recall (0.783 vs 0.852), most on collections and listings, whose main text is a grid of
short item lines that look like the boilerplate around them in these shallow text features.  What the labels
show: with the right label (the truth spent in page order, so near-copies split differently by two extractors
count once) the candidate union holds text for 0.99 / 0.92, so the ceiling is not the limit; the features are.
Next levers: DOM features for the same lines (link density, tag path, block depth from resiliparse's tree), a
sequence model over a page's lines, and more labelled pages than 1,497 (1,296 domains).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extraction_units import TYPES, cached_voters, dev_setup, rules  # noqa: E402
from jobs.text.line_model import FEATURES, assemble, candidate_lines, line_labels, new_model, page_features  # noqa: E402
from jobs.text.lines import words_of  # noqa: E402
from jobs.text.main_text import tf_needed  # noqa: E402

GRID = tuple(round(t, 2) for t in np.arange(0.2, 0.81, 0.05))


def domain(url: str | None) -> str:
    host = (urlsplit(url or "").hostname or "").lower()
    return host.removeprefix("www.") or "?"


def page_rows(page, v, cfg, label="words"):
    """(candidates, features, labels, word weights) of one page, as the job would build them."""
    primary, page_type = (v["rs_hint"], v["hint_type"]) if cfg.page_type_hints else (v["rs"], v["rs_type"])
    ran = tf_needed(primary, cfg, lambda: len(v["rp"].split()))
    tf = (v["tf"] if page_type in cfg.comments_page_types else v["tf_nocomments"]) if ran else ""
    cands = candidate_lines([primary, v["rp"], tf])
    x = page_features(cands, page_type, v["title"], ran)
    return cands, x, line_labels(cands, page.reference, label), np.maximum(x[:, FEATURES.index("words")], 1.0)


def fit(items, idx):
    model = new_model()
    x = np.concatenate([items[i][1] for i in idx])
    y = np.concatenate([items[i][2] for i in idx])
    w = np.concatenate([items[i][3] for i in idx])
    model.fit(x, y, sample_weight=w)
    return model


def page_scores(pages, items, proba, idx, threshold, scorer, cfg):
    out = []
    for i in idx:
        text = assemble(items[i][0], proba[i] >= threshold)
        out.append(scorer.word_f1(text if len(text) >= cfg.min_chars else "", pages[i].reference))
    return out


def best_threshold(pages, items, idx, groups, scorer, cfg) -> float:
    from sklearn.model_selection import GroupKFold

    proba = {}
    for train, test in GroupKFold(n_splits=3).split(idx, groups=[groups[i] for i in idx]):
        model = fit(items, [idx[j] for j in train])
        for j in test:
            proba[idx[j]] = model.predict_proba(items[idx[j]][1])[:, 1] if len(items[idx[j]][0]) else np.zeros(0)
    return max(GRID, key=lambda t: np.mean([f for _, _, f in page_scores(pages, items, proba, idx, t, scorer, cfg)]))


def summarise(pages, scores: dict) -> dict:
    by = defaultdict(list)
    for i, prf in scores.items():
        by[pages[i].page_type].append(prf)
        if pages[i].page_type != "article":
            by["mixed"].append(prf)
    return {t: tuple(float(np.mean([s[k] for s in rows])) for k in range(3)) for t, rows in by.items()}


def print_summary(name, summary):
    cells = "".join(f"{summary[t][2]:8.3f}" for t in (*TYPES, "mixed") if t in summary)
    print(f"  {name:<34}{cells}   P art {summary['article'][0]:.3f} mix {summary['mixed'][0]:.3f}"
          f"  R art {summary['article'][1]:.3f} mix {summary['mixed'][1]:.3f}")


def cv_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a domain-grouped cross-validation bench: folds and the fixed keep threshold."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.5, help="keep lines with P(main text) >= this")
    return parser


def main() -> int:
    parser = cv_parser(__doc__)
    parser.add_argument("--label", choices=("words", "bigrams", "trigrams", "consumed"), default="consumed",
                        help="a line is main text when half its words (or word n-grams) are in the truth; consumed: trigrams, spent in page order")
    parser.add_argument("--inner", action="store_true", help="choose the threshold per fold by an inner grouped 3-fold CV")
    setup = dev_setup(parser)
    if setup is None:
        return 0
    from sklearn.model_selection import GroupKFold

    args, scorer, cfg, pages = setup
    outputs = cached_voters(pages, cfg)
    started = time.perf_counter()
    items = [page_rows(p, outputs[p.id], cfg, args.label) for p in pages]
    groups = [domain(p.url) for p in pages]
    lines = sum(len(it[0]) for it in items)
    print(f"{len(pages)} pages, {len(set(groups))} domains, {lines} candidate lines "
          f"({np.mean(np.concatenate([it[2] for it in items])):.2f} labelled keep); features in "
          f"{time.perf_counter() - started:.1f} s")
    job = rules(cfg)["the job (conf/jobs.yaml)"]
    job_scores = {}
    for i, p in enumerate(pages):
        text = job(outputs[p.id])
        job_scores[i] = scorer.word_f1(text if len(text) >= cfg.min_chars else "", p.reference)
    proba, chosen, model_scores = {}, [], {}
    for fold, (train, test) in enumerate(GroupKFold(n_splits=args.folds).split(pages, groups=groups)):
        t0 = time.perf_counter()
        threshold = best_threshold(pages, items, list(train), groups, scorer, cfg) if args.inner else args.threshold
        model = fit(items, list(train))
        for i in test:
            proba[i] = model.predict_proba(items[i][1])[:, 1] if len(items[i][0]) else np.zeros(0)
        for i, prf in zip(test, page_scores(pages, items, proba, test, threshold, scorer, cfg)):
            model_scores[i] = prf
        chosen.append(threshold)
        print(f"  fold {fold}: {len(test)} test pages, threshold {threshold}, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    hybrid = {i: job_scores[i] if outputs[pages[i].id]["hint_type"] == "article" else model_scores[i]
              for i in model_scores}
    print(f"\n{args.folds}-fold CV grouped by domain; thresholds per fold: {chosen}")
    print(f"  {'word F1':<34}" + "".join(f"{t[:7]:>8}" for t in TYPES) + f"{'mixed':>8}")
    print_summary("the job's rule", summarise(pages, job_scores))
    oracle = {i: scorer.word_f1(assemble(items[i][0], items[i][2].astype(bool)), p.reference) for i, p in enumerate(pages)}
    print_summary("the labels themselves (a ceiling)", summarise(pages, oracle))
    print_summary("line model, every page", summarise(pages, model_scores))
    print_summary("line model, job's rule on articles", summarise(pages, hybrid))
    filtered = {}  # the model as a filter of the job's own lines: it may only drop
    for i, p in enumerate(pages):
        job_keys = {words_of(line) for line in job(outputs[p.id]).splitlines()}
        keep = np.array([c.key in job_keys for c in items[i][0]], dtype=bool) & (proba[i] >= chosen[0])
        text = assemble(items[i][0], keep)
        filtered[i] = scorer.word_f1(text if len(text) >= cfg.min_chars else "", p.reference)
    print_summary("job's lines the model keeps", summarise(pages, filtered))
    print("\n  pooled out-of-fold predictions at fixed thresholds (for the threshold's sensitivity):")
    every = list(range(len(pages)))
    for t in GRID[::2]:
        print_summary(f"threshold {t}", summarise(pages, dict(zip(every, page_scores(pages, items, proba, every, t, scorer, cfg)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
