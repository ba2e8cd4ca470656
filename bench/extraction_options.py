"""Benchmark: the extraction options weighed for the extract job, per WCXB page type, from one pass of each extractor.

    .venv/bin/python bench/extraction_options.py [--limit N]

Each page of ../shared/data/extraction/wcxb_dev (dev split only) is decoded as the job decodes it and run once
through rs-trafilatura (the page type it reads, then with the labelled type forced) and trafilatura (comments
kept, comments dropped); the rules that choose between those texts are then scored with WCXB's own word F1,
`extract.min_chars` applied as the job applies it.  Printed per type: F1, and precision on articles and on the
other types together, beside the rule conf/jobs.yaml sets (`jobs.text.main_text.choose_text`).
`bench/extraction_quality.py` measures the job itself (through `python -m jobs.text.extract_files`) and its speed.

rs-trafilatura's own leanings, measured 2026-11-28 (word F1 per type; mixed = the six non-article types): neither is
a lever, for all pages or for any one type's rule:

| rs-trafilatura | article | forum | product | collection | listing | documentation | service | mixed |
|---|---|---|---|---|---|---|---|---|
| as shipped | 0.935 | 0.759 | 0.668 | 0.679 | 0.699 | 0.938 | 0.831 | 0.762 |
| true type forced (2026-12-06) | 0.935 | 0.766 | 0.663 | 0.680 | 0.699 | 0.938 | 0.831 | 0.762 |
| favor_precision | 0.931 | 0.766 | 0.658 | 0.652 | 0.661 | 0.938 | 0.838 | 0.753 |
| favor_recall | 0.935 | 0.759 | 0.670 | 0.673 | 0.700 | 0.938 | 0.831 | 0.761 |

Knowing each page's true type is worth nothing on mixed pages (0.762 either way): a better page-type classifier is no
lever.  The type the job extracts with (jobs.text.page_type's hint, else rs-trafilatura's own classifier) is right for
768 of 793 articles, 112 of 113 forums and 101 of 119 products; its misses: services and listings read as articles
(32 and 23 pages), collections as products (16).
favor_precision gains 0.007 on forum and service pages and loses 0.01-0.04 on product, collection and listing pages:
switched on for forum and service pages only, and knowing their true type, it would add at most 0.003 on mixed.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rs_trafilatura  # noqa: E402
import trafilatura  # noqa: E402

from bench.extraction_units import dev_setup, print_rules  # noqa: E402
from jobs.text.decode import decode_html  # noqa: E402
from jobs.text.main_text import choose_text, tidy  # noqa: E402

def texts_of(page, cfg) -> dict:
    html = decode_html(gzip.decompress(page.html_gz.read_bytes()), None, aliases=cfg.charset_aliases,
                       fallback=cfg.fallback_encoding, sniff_bytes=cfg.meta_sniff_bytes).text
    rs = rs_trafilatura.extract(html, url=page.url)
    forced = rs_trafilatura.extract(html, url=page.url, page_type=page.page_type)
    leaning = {lean: tidy(rs_trafilatura.extract(html, url=page.url, include_tables=True, **{lean: True}).main_content)
               for lean in ("favor_precision", "favor_recall")}
    tf = {comments: tidy(trafilatura.extract(html, url=page.url, include_comments=comments, include_tables=True,
                                             deduplicate=False, with_metadata=False))
          for comments in (True, False)}
    return {"rs": tidy(rs.main_content), "rs_type": rs.page_type, "rs_forced": tidy(forced.main_content),
            "rs_favor_precision": leaning["favor_precision"], "rs_favor_recall": leaning["favor_recall"],
            "tf": tf[True], "tf_nocomments": tf[False]}


def rules(cfg) -> dict:
    old = dataclasses.replace(cfg, fallback_min_words=50, fallback_min_gain=1.0)
    return {
        "rs-trafilatura alone": lambda t: t["rs"],
        "rs-trafilatura, true type forced": lambda t: t["rs_forced"],
        "rs-trafilatura, favor_precision": lambda t: t["rs_favor_precision"],
        "rs-trafilatura, favor_recall": lambda t: t["rs_favor_recall"],
        "trafilatura alone (comments)": lambda t: t["tf"],
        "trafilatura alone (no comments)": lambda t: t["tf_nocomments"],
        "old: <50 words, longer wins": lambda t: choose_text(t["rs"], lambda: t["tf"], old),
        "conf: min words, gain, comments by type": lambda t: choose_text(
            t["rs"], lambda: t["tf"] if t["rs_type"] in cfg.comments_page_types else t["tf_nocomments"], cfg),
    }


def main() -> int:
    setup = dev_setup(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    if setup is None:
        return 0
    _, scorer, cfg, pages = setup
    outputs = {page.id: texts_of(page, cfg) for page in pages}
    print_rules(pages, outputs, rules(cfg), cfg, scorer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
