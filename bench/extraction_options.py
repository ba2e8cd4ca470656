"""Benchmark: the extraction options weighed for the extract job, per WCXB page type, from one pass of each extractor.

    .venv/bin/python bench/extraction_options.py [--limit N]

Each page of ../shared/data/extraction/wcxb_dev (dev split only) is decoded as the job decodes it and run once
through rs-trafilatura (the page type it reads, then with the labelled type forced) and trafilatura (comments
kept, comments dropped); the rules that choose between those texts are then scored with WCXB's own word F1,
`extract.min_chars` applied as the job applies it.  Printed per type: F1, and precision on articles and on the
other types together, beside the rule conf/jobs.yaml sets (`jobs.text.main_text.choose_text`).
`bench/extraction_quality.py` measures the job itself (through `python -m jobs.text.extract_files`) and its speed.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import logging
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rs_trafilatura  # noqa: E402
import trafilatura  # noqa: E402

from bench.extraction_quality import DATA, load_wcxb_dev, wcxb_scorer  # noqa: E402
from jobs.config import load_jobs_config  # noqa: E402
from jobs.text.decode import decode_html  # noqa: E402
from jobs.text.main_text import choose_text, tidy  # noqa: E402

TYPES = ("article", "forum", "product", "collection", "listing", "documentation", "service")


def texts_of(page, cfg) -> dict:
    html = decode_html(gzip.decompress(page.html_gz.read_bytes()), None, aliases=cfg.charset_aliases,
                       fallback=cfg.fallback_encoding, sniff_bytes=cfg.meta_sniff_bytes).text
    rs = rs_trafilatura.extract(html, url=page.url)
    forced = rs_trafilatura.extract(html, url=page.url, page_type=page.page_type)
    tf = {comments: tidy(trafilatura.extract(html, url=page.url, include_comments=comments, include_tables=True,
                                             deduplicate=False, with_metadata=False))
          for comments in (True, False)}
    return {"rs": tidy(rs.main_content), "rs_type": rs.page_type, "rs_forced": tidy(forced.main_content),
            "tf": tf[True], "tf_nocomments": tf[False]}


def rules(cfg) -> dict:
    old = dataclasses.replace(cfg, fallback_min_words=50, fallback_min_gain=1.0)
    return {
        "rs-trafilatura alone": lambda t: t["rs"],
        "rs-trafilatura, true type forced": lambda t: t["rs_forced"],
        "trafilatura alone (comments)": lambda t: t["tf"],
        "trafilatura alone (no comments)": lambda t: t["tf_nocomments"],
        "old: <50 words, longer wins": lambda t: choose_text(t["rs"], lambda: t["tf"], old),
        "conf: min words, gain, comments by type": lambda t: choose_text(
            t["rs"], lambda: t["tf"] if t["rs_type"] in cfg.comments_page_types else t["tf_nocomments"], cfg),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="at most this many pages per page type (a quick run)")
    args = parser.parse_args()
    scorer = wcxb_scorer()
    if scorer is None:
        print(f"skipped: {DATA / 'wcxb_dev'} is absent (the shared data set is not beside this checkout)")
        return 0
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    cfg = load_jobs_config().extract
    pages, taken = [], defaultdict(int)
    for page in load_wcxb_dev(scorer):
        if args.limit is None or taken[page.page_type] < args.limit:
            taken[page.page_type] += 1
            pages.append(page)
    outputs = [(page, texts_of(page, cfg)) for page in pages]
    print(f"WCXB dev, {len(pages)} pages: word F1 per page type (min_chars {cfg.min_chars} applied); P = precision")
    print(f"  {'rule':<42}" + "".join(f"{t[:7]:>8}" for t in TYPES) + f"{'mixed':>8}{'P art':>7}{'P mix':>7}")
    for name, rule in rules(cfg).items():
        scores = defaultdict(list)
        for page, texts in outputs:
            text = rule(texts)
            p_r_f = scorer.word_f1(text if len(text) >= cfg.min_chars else "", page.reference)
            scores[page.page_type].append(p_r_f)
            if page.page_type != "article":
                scores["mixed"].append(p_r_f)
        mean = lambda rows, i: sum(r[i] for r in rows) / len(rows) if rows else float("nan")
        print(f"  {name:<42}" + "".join(f"{mean(scores[t], 2):8.3f}" for t in TYPES + ("mixed",))
              + f"{mean(scores['article'], 0):7.3f}{mean(scores['mixed'], 0):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
