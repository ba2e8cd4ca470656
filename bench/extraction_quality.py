"""Benchmark: the extract job's main text against labelled pages, per page type, beside plain trafilatura.

    .venv/bin/python bench/extraction_quality.py [--set wcxb_dev|trafilatura_eval|readability_testpages|all]
                                                 [--limit N] [-o extract.KEY=VALUE ...] [--no-urls]

For each page type of a labelled set, the pages are laid out as files (`<id>.html.gz` + `<id>.url`) and
run through `python -m jobs.text.extract_files`, the job's own code and conf/jobs.yaml (with any `-o`; with
`--no-urls`, without the `.url` files, so that the job reads the URL the page declares, if any);
then plain `trafilatura.extract(html)` runs over the same pages in this process.  Printed per type:
precision, recall, F1 and speed for both, and pages left empty.  Speed is documents per CPU-second
(docs/s on one core, the sandbox child's CPU included), so that a busy machine does not change it.
bench/extraction_speed.py measures speed alone, page by page against rs-trafilatura alone and plain trafilatura
in one process, with a profile per component.

Metrics are each benchmark's own: WCXB's `evaluate.py` word F1 (mean of per-page P, R, F1; an empty
text scores 0 unless the page has no main content); trafilatura's snippet counts (a `with` snippet
found is a true positive, a `without` snippet found a false positive, summed over pages); readability's
expected article HTML as text, scored with WCXB's word F1.  The sets live in ../shared/data/extraction/
(skips cleanly when absent).  Goals (issue 11, WCXB dev): F1 >= 0.97 on articles and >= 0.90 on the
other types together, precision no lower than plain trafilatura's, >= 60 docs/s/core on articles (also checked
as a ratio to plain trafilatura in the same run: the issue measured it at 67 docs/s, so >= 0.90x).
"""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "extraction"
SETS = ("wcxb_dev", "trafilatura_eval", "readability_testpages")
GOALS = {"article_f1": 0.97, "mixed_f1": 0.90, "article_docs_per_s": 60.0}
# The issue set 60 docs/s where plain trafilatura ran 67 docs/s on articles on its machine: the same goal as a ratio
# to plain trafilatura measured here, in the same run, holds on any machine (a slow core lowers both alike).
PLAIN_ARTICLES_DOCS_PER_S_AT_GOAL = 67.0


@dataclass(frozen=True)
class Labelled:
    id: str
    page_type: str
    html_gz: Path
    url: str | None
    reference: str | None = None        # the main text (word-F1 sets)
    with_snippets: tuple = ()           # trafilatura_eval: must be in the text
    without_snippets: tuple = ()        # trafilatura_eval: must not be


def wcxb_scorer():
    """WCXB's own evaluate.py (its word_f1 and page-type reading), or None when the set is absent."""
    path = DATA / "wcxb_dev" / "evaluate.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("wcxb_evaluate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_wcxb_dev(scorer) -> list[Labelled]:
    pages = []
    for truth in sorted((DATA / "wcxb_dev" / "dev" / "ground-truth").glob("*.json")):
        data = json.loads(truth.read_text())
        ground = data.get("ground_truth") or {}
        pages.append(Labelled(truth.stem, scorer.get_page_type(data), DATA / "wcxb_dev" / "dev" / "html" / f"{truth.stem}.html.gz",
                              data.get("url"), reference=ground.get("main_content") or ""))
    return pages


def load_trafilatura_eval(_scorer) -> list[Labelled]:
    base = DATA / "trafilatura_eval"
    pages = []
    for url, item in json.loads((base / "evaldata.json").read_text()).items():
        found = [base / folder / (item["file"] + ".gz") for folder in ("eval", "cache")]
        html_gz = next((p for p in found if p.exists()), None)
        if html_gz is not None:
            pages.append(Labelled(item["file"].removesuffix(".html"), "trafilatura_eval", html_gz, url,
                                  with_snippets=tuple(item.get("with") or ()), without_snippets=tuple(item.get("without") or ())))
    return pages


def load_readability_testpages(_scorer) -> list[Labelled]:
    import lxml.html

    pages = []
    for case in sorted((DATA / "readability_testpages" / "pages").iterdir()):
        expected = case / "expected.html"
        if (case / "source.html.gz").exists() and expected.exists():
            tree = lxml.html.fromstring(expected.read_bytes())
            pages.append(Labelled(case.name, "readability", case / "source.html.gz", None,
                                  reference=tree.text_content()))
    return pages


LOADERS = {"wcxb_dev": load_wcxb_dev, "trafilatura_eval": load_trafilatura_eval,
           "readability_testpages": load_readability_testpages}


def lay_out(pages: list[Labelled], folder: Path, urls: bool = True) -> None:
    """The pages as extract_files reads them: `<id>.html.gz` (a link to the set's file) and `<id>.url` (`urls`)."""
    folder.mkdir(parents=True)
    for page in pages:
        os.symlink(page.html_gz, folder / f"{page.id}.html.gz")
        if page.url and urls:
            (folder / f"{page.id}.url").write_text(page.url + "\n")


def run_extract_files(folder: Path, overrides: list[str]) -> tuple[dict, dict]:
    """(id -> text, the command's stats) from one `python -m jobs.text.extract_files` run."""
    out, stats = folder.with_suffix(".jsonl"), folder.with_suffix(".stats.json")
    command = [sys.executable, "-m", "jobs.text.extract_files", str(folder), str(out), "--stats", str(stats)]
    for item in overrides:
        command += ["-o", item]
    subprocess.run(command, cwd=ROOT, check=True, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    texts = {}
    with open(out, encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            texts[row["id"]] = row["text"]
    return texts, json.loads(stats.read_text())


def run_plain_trafilatura(pages: list[Labelled]) -> tuple[dict, float]:
    """(id -> text, docs per CPU-second) of `trafilatura.extract(html)` with its defaults, in this process."""
    import trafilatura

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    htmls = [(page.id, gzip.decompress(page.html_gz.read_bytes())) for page in pages]
    texts, started = {}, time.process_time()
    for page_id, html in htmls:
        try:
            texts[page_id] = trafilatura.extract(html) or ""
        except Exception:  # plain use: whatever it raises is an empty result
            texts[page_id] = ""
    return texts, len(htmls) / (time.process_time() - started)


def score(pages: list[Labelled], texts: dict, scorer) -> tuple[float, float, float]:
    """(precision, recall, F1) of `texts` on `pages` with the set's own metric."""
    if pages[0].reference is None:  # trafilatura's snippet counts, summed over the pages
        tp = fn = fp = 0
        for page in pages:
            text = texts.get(page.id, "")
            hits = sum(s in text for s in page.with_snippets)
            tp, fn = tp + hits, fn + len(page.with_snippets) - hits
            fp += sum(s in text for s in page.without_snippets)
        precision, recall = tp / max(1, tp + fp), tp / max(1, tp + fn)
        return precision, recall, 2 * precision * recall / max(1e-9, precision + recall)
    per_page = [scorer.word_f1(texts.get(page.id, ""), page.reference) for page in pages]
    return tuple(sum(values) / len(per_page) for values in zip(*per_page))


def benchmark(name: str, scorer, limit: int | None, overrides: list[str], urls: bool = True) -> dict:
    pages = LOADERS[name](scorer)
    by_type = defaultdict(list)
    for page in pages:
        if limit is None or len(by_type[page.page_type]) < limit:
            by_type[page.page_type].append(page)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="weblm-extraction-bench-") as tmp:
        ours, plain = {}, {}
        for page_type, typed in sorted(by_type.items(), key=lambda kv: (kv[0] != "article", kv[0])):
            lay_out(typed, Path(tmp) / page_type, urls)
            ours_texts, stats = run_extract_files(Path(tmp) / page_type, overrides)
            plain_texts, plain_rate = run_plain_trafilatura(typed)
            ours.update(ours_texts)
            plain.update(plain_texts)
            rows[page_type] = _row(typed, ours_texts, plain_texts, scorer, stats["docs_per_cpu_s"], plain_rate)
        if len(by_type) > 2:  # WCXB: the goal is set on every type but article together
            mixed = [page for page_type, typed in by_type.items() if page_type != "article" for page in typed]
            rows["mixed (not article)"] = _row(mixed, ours, plain, scorer, None, None)
            # the benchmark's own figure (its README's table): every page alike
            rows["all pages"] = _row([page for typed in by_type.values() for page in typed], ours, plain, scorer,
                                     None, None)
    return rows


def _row(pages, ours, plain, scorer, ours_rate, plain_rate) -> dict:
    return {"n": len(pages), "ours": score(pages, ours, scorer), "plain": score(pages, plain, scorer),
            "ours_empty": sum(not ours.get(p.id) for p in pages), "plain_empty": sum(not plain.get(p.id) for p in pages),
            "ours_docs_per_s": ours_rate, "plain_docs_per_s": plain_rate}


def print_table(name: str, rows: dict) -> None:
    rate = lambda r: f"{r:6.1f}" if r is not None else "     -"
    print(f"\n{name}: extract_files (the job's settings) vs plain trafilatura.extract; P/R/F1, empty pages, docs per CPU-second")
    print(f"  {'type':<20}{'n':>5} | {'P':>6}{'R':>6}{'F1':>6}{'empty':>6}{'doc/s':>7} | {'P':>6}{'R':>6}{'F1':>6}{'empty':>6}{'doc/s':>7}")
    for page_type, row in rows.items():
        (op, orc, of), (pp, pr, pf) = row["ours"], row["plain"]
        print(f"  {page_type:<20}{row['n']:>5} | {op:6.3f}{orc:6.3f}{of:6.3f}{row['ours_empty']:6d} {rate(row['ours_docs_per_s'])} "
              f"| {pp:6.3f}{pr:6.3f}{pf:6.3f}{row['plain_empty']:6d} {rate(row['plain_docs_per_s'])}")


def print_goals(rows: dict) -> None:
    article, mixed = rows.get("article"), rows.get("mixed (not article)")
    if not article or not mixed:
        return
    checks = [(f"article F1 {article['ours'][2]:.3f} >= {GOALS['article_f1']}", article["ours"][2] >= GOALS["article_f1"]),
              (f"mixed F1 {mixed['ours'][2]:.3f} >= {GOALS['mixed_f1']}", mixed["ours"][2] >= GOALS["mixed_f1"]),
              (f"article precision {article['ours'][0]:.3f} >= plain {article['plain'][0]:.3f}", article["ours"][0] >= article["plain"][0]),
              (f"mixed precision {mixed['ours'][0]:.3f} >= plain {mixed['plain'][0]:.3f}", mixed["ours"][0] >= mixed["plain"][0]),
              (f"articles {article['ours_docs_per_s']:.1f} docs/s >= {GOALS['article_docs_per_s']:.0f}",
               article["ours_docs_per_s"] >= GOALS["article_docs_per_s"])]
    ratio, needed = (article["ours_docs_per_s"] / article["plain_docs_per_s"],
                     GOALS["article_docs_per_s"] / PLAIN_ARTICLES_DOCS_PER_S_AT_GOAL)
    checks.append((f"articles {ratio:.2f}x plain trafilatura's docs/s >= the goal's {needed:.2f}x", ratio >= needed))
    print("  goals: " + "; ".join(f"{text}: {'met' if ok else 'MISSED'}" for text, ok in checks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=SETS + ("all",), default="wcxb_dev")
    parser.add_argument("--limit", type=int, help="at most this many pages per page type (a quick run)")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a conf/jobs.yaml setting for the job's side, e.g. extract.extractor=trafilatura")
    parser.add_argument("--no-urls", action="store_true",
                        help="lay the pages out without their .url files, as bare HTML files come")
    args = parser.parse_args()
    scorer = wcxb_scorer()
    if scorer is None:  # its word_f1 is the metric of every word-level set here
        print(f"skipped: {DATA / 'wcxb_dev'} is absent (the shared data set is not beside this checkout)")
        return 0
    for name in SETS if args.set == "all" else (args.set,):
        if not (DATA / name).exists():
            print(f"skipped {name}: {DATA / name} is absent")
            continue
        rows = benchmark(name, scorer, args.limit, args.override, urls=not args.no_urls)
        print_table(name, rows)
        if name == "wcxb_dev":
            print_goals(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
