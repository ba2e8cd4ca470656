"""Benchmark: the line classifier with DOM features (jobs.text.dom_features) against text-only and the job's rule.

    .venv/bin/python bench/extraction_dom.py [--limit N] [--folds 5] [--importances]

The same candidates, labels (trigrams consumed in page order), folds (5, grouped by domain), fixed 0.5 threshold
and scoring (WCXB's own word F1, `extract.min_chars` applied) as bench/extraction_lines.py, over WCXB dev only
(never the held-out test split).  Each page's HTML is decoded as the job decodes it and parsed once with lxml;
each candidate line gets `DOM_FEATURES` beside the text features (cached in var/bench/extraction_dom.pkl, keyed by
the feature code).  Printed per type: the job's rule, the labels' ceiling, the text-only model, the text+DOM
model, and hybrids that use the model only where the rule is weak (by the page type the job hints) and the rule
elsewhere, and per type P / R / F1.  `--importances`: permutation importances (text + DOM + the rule's keep) of a
model trained on 80 % of the lines, on a sample of the rest.  `--variants NAME ...`: only those models.

Measured (2026-11-27, WCXB dev 1,497 pages, 1,296 domains, 203,498 candidate lines of which 92.2 % are found in
the DOM; 5 folds; threshold 0.5 fixed beforehand; word F1 per type, then P / R over articles and the six other
types ("mixed"); the hybrids switch on the page type the job hints, not the true one):

| | article | forum | product | collection | listing | documentation | service | mixed | P art / mix | R art / mix |
|---|---|---|---|---|---|---|---|---|---|---|
| the job's rule | 0.947 | 0.783 | 0.684 | 0.706 | 0.721 | 0.939 | 0.840 | 0.778 | 0.929 / 0.776 | 0.982 / 0.852 |
| the labels themselves (ceiling) | 0.990 | 0.909 | 0.929 | 0.875 | 0.871 | 0.976 | 0.948 | 0.919 | 0.991 / 0.960 | 0.991 / 0.904 |
| text-only model | 0.944 | 0.786 | 0.670 | 0.591 | 0.659 | 0.927 | 0.842 | 0.747 | 0.939 / 0.784 | 0.967 / 0.783 |
| text + DOM model | 0.953 | 0.790 | 0.698 | 0.600 | 0.667 | 0.934 | 0.845 | 0.757 | 0.947 / 0.793 | 0.972 / 0.788 |
| hybrid: DOM model on forum, product, collection, listing, service; rule elsewhere | 0.946 | 0.790 | 0.698 | 0.610 | 0.670 | 0.939 | 0.842 | 0.759 | 0.931 / 0.788 | 0.979 / 0.798 |
| text + DOM + "the rule keeps it" as a feature | 0.955 | 0.791 | 0.700 | 0.604 | 0.656 | 0.931 | 0.842 | 0.756 | 0.948 / 0.795 | 0.973 / 0.785 |
| the same, trained on non-article pages only | 0.940 | 0.790 | 0.690 | 0.619 | 0.653 | 0.929 | 0.844 | 0.756 | 0.930 / 0.799 | 0.967 / 0.783 |
| its hybrid (forum..service) | 0.946 | 0.790 | 0.687 | 0.626 | 0.651 | 0.940 | 0.839 | 0.757 | 0.931 / 0.794 | 0.979 / 0.789 |

The model as an editor of the rule's text on non-article pages (the rule's lines minus those with P < t, plus
other candidates with P >= 0.9; articles: the rule), a rerun of the text + DOM model: every variant is worse than
the rule on mixed pages: minus P<0.1 0.945 / 0.715, minus P<0.2 0.698, minus P<0.3 0.689, plus P>=0.9 only
0.752 (P 0.733), both (0.2, 0.9) 0.746.  Even the P<0.1 cut loses recall on documentation (0.974 -> 0.737).
Why (2026-12-03, a rerun: "rule -P<0.0 +P>=1.1", the rule's own lines found among the candidates, gives 0.946 /
0.772, so the lines do line up): the model does not say "boilerplate", it says "the other copy".  With the consumed
labels a line's second copy in page order is 0, and resiliparse often holds the same paragraph split differently.
On documentation pages the rule's lines with P < 0.1 hold 78,947 words: 73,339 of them (93 %) sit inside lines the
model keeps, 3,692 (4.7 %) are labelled main text.  So dropping them removes the rule's copy while the model's copy
is not added, and adding P >= 0.9 lines adds the second copy of text the rule already has (documentation P 0.926
-> 0.770).  A word-aware editor (a scratch run, not kept: a rule line is dropped only when it and every candidate
holding its words or held in it have P < t; a line is added only when its words are not in the rule's text) gives
0.772 -> 0.774 on mixed pages at t = 0.05 to 0.2, adding P >= 0.9 lines 0.757-0.759 (documentation still 0.844): all
under the rule's 0.778.  No-go.

Per type P / R / F1 (the same run):

| | article | forum | product | collection | listing | documentation | service | mixed |
|---|---|---|---|---|---|---|---|---|
| the job's rule | .929/.982/.947 | .775/.855/.783 | .654/.839/.684 | .714/.781/.706 | .738/.788/.721 | .926/.974/.939 | .849/.879/.840 | .776/.852/.778 |
| the labels (ceiling) | .991/.991/.990 | .938/.889/.909 | .954/.922/.929 | .953/.853/.875 | .952/.843/.871 | .975/.981/.976 | .979/.934/.948 | .960/.904/.919 |
| text + DOM model | .947/.972/.953 | .809/.829/.790 | .723/.754/.698 | .677/.630/.600 | .733/.693/.667 | .940/.945/.934 | .868/.866/.845 | .793/.788/.757 |

No-go (the bar: mixed +0.02 over the rule with articles no worse).  DOM features add +0.009 on articles and
+0.010 on mixed pages over text-only features (precision +0.008 / +0.009) and lift product pages above the rule
(0.698 vs 0.684), but every model stays 0.02 below the rule on mixed pages, all of it recall on collections and
listings (0.60 / 0.67 vs 0.71 / 0.72).  Even given the rule's own decision as a feature, the model does not
reproduce the rule: at a line-level objective (labels weighted by words) dropping the rule's unlabelled grid
lines is "right" more often than not, while the page-level word F1 pays for each lost item.  The objective, not
the features, is the gap now.  Permutation importance (the text + DOM model on 80 % of the lines, 30,000
held-out lines, 2 repeats; word-weighted accuracy lost): in_rp 0.191 (resiliparse keeps the line), copy_index 0.022, cover_rs 0.020, cover_rp
0.013, log_rs_words 0.009, rep_max_anc 0.009 (the most-repeated sibling group among the line's ancestors: item
grids), page_lines 0.007, rel_pos 0.006; then DOM's cls_comment 0.005, pos_block 0.004, cls_modal 0.003,
par_log_words, gpar_link_density, rs_container_depth_gap, rep_self 0.003 each.  Cost: decoding, parsing with lxml
and the features ran at 18 pages/s on one core of a machine at load 5-9 (not a clean speed figure).
Next levers: train for the page metric, not the line (a per-page-type threshold chosen by inner CV, or a
page-level choice between the rule's text and the model's, learned on the page F1 each gives), a sequence
model over a page's blocks (Web2Text's CRF over DOM leaves) so that an item grid is kept or dropped as a whole,
and more labelled collection / listing pages than WCXB dev's 117 / 99.

Candidates from one source, so that no paragraph has two copies (2026-12-03, a scratch run, not kept): the lines of
resiliparse's whole-page text (`main_content=False`, 431,697 lines), with line_model's text features plus the share
of each line's word trigrams in rs-trafilatura's, resiliparse's main-content, trafilatura's and the rule's texts; the
same folds and consumed labels.  The labels' ceiling is 0.991 / 0.923 (forums only 0.763: the whole-page text splits
posts differently), but the model gives 0.946 / 0.728 at 0.5 and at best 0.736 at 0.4, and the rule's own words
marked on these lines (its trigram share >= 0.5) 0.938 / 0.726: the line boundaries, not only the features, cost
0.05 on mixed pages.  No-go.

A sequence model's cheap form, stacked sequential learning (2026-12-05, a scratch run, not kept): the text + DOM +
"the rule keeps it" model's out-of-fold P per line (stage 1), then a second model over the same features plus the
stage-1 P of the lines 1, 2, 3 and 5 before and after, the mean P over windows of 3 and 10 lines either side, and
the page's mean P and kept share, cross-validated on the same 5 domain folds.  Articles / mixed at 0.5: stage 1
0.954 / 0.761, stage 2 0.953 / 0.748 (listings 0.671 -> 0.623, service 0.852 -> 0.833); the rule 0.947 / 0.778.
The neighbours' P makes item grids no likelier to be kept whole: it spreads the stage-1 drops to their neighbours.
No-go.
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
    results, probas = {}, {}
    variants = {"text-only model": (text_items, None), "text + DOM model": (dom_items, None),
                "text + DOM + the rule's keep": (rule_items, None),
                "the same, trained on non-articles": (rule_items, lambda i: hint[i] != "article")}
    for name in args.variants or variants:
        items, train_on = variants[name]
        t0 = time.perf_counter()
        proba, results[name] = cross_validate(pages, items, groups, args.folds, args.threshold, cfg, scorer, train_on)
        probas[name] = (items, proba)
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
    # the model as an editor of the rule's text: it drops the rule's lines it is sure of, adds lines it is sure of
    for name, (items, proba) in probas.items():
        for drop_below, add_above in ((0.0, 1.1), (0.1, 1.1), (0.2, 1.1), (0.3, 1.1), (0.0, 0.9), (0.2, 0.9)):
            edited = {}
            for i, p in enumerate(pages):
                keys = job_keys[i]
                keep = np.array([(c.key in keys and q >= drop_below) or q >= add_above
                                 for c, q in zip(items[i][0], proba[i])], dtype=bool)
                text = assemble(items[i][0], keep) if hint[i] != "article" else job(outputs[p.id])
                edited[i] = scorer.word_f1(text if len(text) >= cfg.min_chars else "", p.reference)
            results[f"rule minus P<{drop_below}, plus P>={add_above}"] = edited
            print_summary(f"rule -P<{drop_below} +P>={add_above} ({name[:8]})", summarise(pages, edited))
    print("\n  per type P / R / F1")
    detail = {"the job's rule": job_scores, "the labels (ceiling)": oracle, **results}
    for name, scores in detail.items():
        summary = summarise(pages, scores)
        print(f"  {name[:34]:<34}" + "".join(f"  {t[:4]} {'/'.join(f'{v:.3f}' for v in summary[t])}"
                                            for t in (*TYPES, "mixed") if t in summary))
    if args.importances:
        importances(rule_items, list(FEATURES) + list(DOM_FEATURES) + ["in_job"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
