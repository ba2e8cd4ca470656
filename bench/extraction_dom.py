"""Benchmark: the line classifier with DOM features (jobs.text.dom_features) against text-only and the job's rule.

    .venv/bin/python bench/extraction_dom.py [--limit N] [--folds 5] [--importances]

The same candidates, labels (trigrams consumed in page order), folds (5, grouped by domain), fixed 0.5 threshold
and scoring (WCXB's own word F1, `extract.min_chars` applied) as bench/extraction_lines.py, over WCXB dev only
(never the held-out test split).  Each page's HTML is decoded as the job decodes it and parsed once with lxml;
each candidate line gets `DOM_FEATURES` beside the text features (cached in var/bench/extraction_dom.pkl, keyed by
the feature code).  Printed per type: the job's rule, the labels' ceiling, the text-only model, the text+DOM
model, and hybrids that use the model only where the rule is weak (by the page type the job hints) and the rule
elsewhere.  `--importances`: permutation importances of a model trained on every page, on a sample of lines.
"""
from __future__ import annotations

import gzip
import hashlib
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extraction_lines import cv_parser, domain, page_rows, print_summary, summarise  # noqa: E402
from bench.extraction_units import TYPES, cached_voters, dev_setup, rules  # noqa: E402
from jobs.text import dom_features as dom_module  # noqa: E402
from jobs.text.decode import decode_html  # noqa: E402
from jobs.text.dom_features import DOM_FEATURES, dom_features  # noqa: E402
from jobs.text.line_model import FEATURES, assemble, new_model  # noqa: E402
from jobs.text.lines import words_of  # noqa: E402

CACHE = ROOT / "var" / "bench" / "extraction_dom.pkl"
WEAK_TYPES = ("forum", "product", "collection", "listing", "service")


def page_html(page, cfg) -> str:
    return decode_html(gzip.decompress(page.html_gz.read_bytes()), None, aliases=cfg.charset_aliases,
                       fallback=cfg.fallback_encoding, sniff_bytes=cfg.meta_sniff_bytes).text


def cached_dom(pages, items, cfg) -> dict:
    key = hashlib.sha256(Path(dom_module.__file__).read_bytes()).hexdigest()
    cache = pickle.loads(CACHE.read_bytes()) if CACHE.exists() else {}
    if cache.get("key") != key:
        cache = {"key": key, "pages": {}}
    todo = [i for i, p in enumerate(pages) if p.id not in cache["pages"]]
    started = time.perf_counter()
    for n, i in enumerate(todo, 1):
        cands = items[i][0]
        cache["pages"][pages[i].id] = dom_features(page_html(pages[i], cfg), [c.key for c in cands],
                                                   [c.sources for c in cands])
        if n % 200 == 0 or n == len(todo):
            print(f"  dom features: {n}/{len(todo)} pages, {n / (time.perf_counter() - started):.1f} pages/s",
                  file=sys.stderr)
            CACHE.parent.mkdir(parents=True, exist_ok=True)
            CACHE.write_bytes(pickle.dumps(cache))
    return cache["pages"]


def cross_validate(pages, items, groups, folds, threshold, cfg, scorer, train_on=None):
    """Out-of-fold P(main text) per page, and each page's (P, R, F1) at `threshold`; `train_on(i)`: which of a
    fold's training pages the model learns from (all by default)."""
    from sklearn.model_selection import GroupKFold

    proba, scores = {}, {}
    for train, test in GroupKFold(n_splits=folds).split(pages, groups=groups):
        train = [i for i in train if train_on is None or train_on(i)]
        model = new_model()
        model.fit(np.concatenate([items[i][1] for i in train]), np.concatenate([items[i][2] for i in train]),
                  sample_weight=np.concatenate([items[i][3] for i in train]))
        for i in test:
            proba[i] = model.predict_proba(items[i][1])[:, 1] if len(items[i][0]) else np.zeros(0)
            text = assemble(items[i][0], proba[i] >= threshold)
            scores[i] = scorer.word_f1(text if len(text) >= cfg.min_chars else "", pages[i].reference)
    return proba, scores


def importances(items, names, sample=30000, seed=0):
    from sklearn.inspection import permutation_importance

    x = np.concatenate([it[1] for it in items])
    y = np.concatenate([it[2] for it in items])
    w = np.concatenate([it[3] for it in items])
    rng = np.random.default_rng(seed)
    held = rng.random(len(y)) < 0.2
    model = new_model().fit(x[~held], y[~held], sample_weight=w[~held])
    pick = rng.choice(np.flatnonzero(held), size=min(sample, int(held.sum())), replace=False)
    result = permutation_importance(model, x[pick], y[pick], sample_weight=w[pick], n_repeats=2, random_state=seed)
    order = np.argsort(-result.importances_mean)
    print("\n  permutation importance (word-weighted line accuracy lost; 20 % of lines held out, a sample):")
    for j in order[:25]:
        print(f"    {names[j]:<26}{result.importances_mean[j]:8.4f}")


def main() -> int:
    parser = cv_parser(__doc__)
    parser.add_argument("--importances", action="store_true")
    parser.add_argument("--variants", nargs="*", help="which models to cross-validate (default: all)")
    setup = dev_setup(parser)
    if setup is None:
        return 0
    args, scorer, cfg, pages = setup
    outputs = cached_voters(pages, cfg)
    text_items = [page_rows(p, outputs[p.id], cfg, "consumed") for p in pages]
    dom = cached_dom(pages, text_items, cfg)
    dom_items = [(c, np.hstack([x, dom[p.id]]), y, w) for p, (c, x, y, w) in zip(pages, text_items)]
    job = rules(cfg)["the job (conf/jobs.yaml)"]
    job_keys = [{words_of(line) for line in job(outputs[p.id]).splitlines()} for p in pages]
    rule_items = [(c, np.hstack([x, np.array([float(cand.key in keys) for cand in c], np.float32).reshape(-1, 1)]), y, w)
                  for keys, (c, x, y, w) in zip(job_keys, dom_items)]
    hint = [outputs[p.id]["hint_type"] for p in pages]
    groups = [domain(p.url) for p in pages]
    mapped = np.concatenate([dom[p.id][:, 0] for p in pages])
    print(f"{len(pages)} pages, {len(set(groups))} domains, {len(mapped)} candidate lines, "
          f"{mapped.mean():.3f} of them found in the DOM")
    job_scores = {}
    for i, p in enumerate(pages):
        text = job(outputs[p.id])
        job_scores[i] = scorer.word_f1(text if len(text) >= cfg.min_chars else "", p.reference)
    results = {}
    variants = {"text-only model": (text_items, None), "text + DOM model": (dom_items, None),
                "text + DOM + the rule's keep": (rule_items, None),
                "the same, trained on non-articles": (rule_items, lambda i: hint[i] != "article")}
    for name in args.variants or variants:
        items, train_on = variants[name]
        t0 = time.perf_counter()
        results[name] = cross_validate(pages, items, groups, args.folds, args.threshold, cfg, scorer, train_on)[1]
        print(f"  {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(f"\n{args.folds}-fold CV grouped by domain, threshold {args.threshold} fixed beforehand")
    print(f"  {'word F1':<34}" + "".join(f"{t[:7]:>8}" for t in TYPES) + f"{'mixed':>8}")
    print_summary("the job's rule", summarise(pages, job_scores))
    oracle = {i: scorer.word_f1(assemble(it[0], it[2].astype(bool)), p.reference)
              for i, (p, it) in enumerate(zip(pages, text_items))}
    print_summary("the labels themselves (a ceiling)", summarise(pages, oracle))
    for name, scores in results.items():
        print_summary(name, summarise(pages, scores))
    for name, scores in results.items():
        if name != "text-only model":
            for label, weak in (("not on articles", set(TYPES) - {"article"}), ("forum..service only", set(WEAK_TYPES))):
                hybrid = {i: scores[i] if hint[i] in weak else job_scores[i] for i in job_scores}
                print_summary(f"{name[:20]}, {label}", summarise(pages, hybrid))
    if args.importances:
        importances(rule_items, list(FEATURES) + list(DOM_FEATURES) + ["in_job"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
