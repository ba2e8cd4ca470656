"""Benchmark: the extract job's cost per page against rs-trafilatura alone and plain trafilatura, in one process.

    .venv/bin/python bench/extraction_speed.py [--limit N] [--profile] [--compare OLD_main_text.py]

WCXB dev's pages (never its held-out test split), as two sets: articles and the six other types together
(mixed).  Every variant first makes one untimed pass over the articles, then runs over each set in passes of
its own, four each, in the order A B C D, D C B A, A B C D, D C B A, so that a change in the machine's load falls on
all of them alike.  The warm pass: a fresh process's first pages cost more (lazy initialisation, its allocator's
arenas growing; the sandbox's child took 19.1 ms a page in its first pass of 150 articles, then 16.4-16.6), and a
Spark worker's child extracts thousands of pages, so the steady state is the job's cost.  With one page of warm-up
and the variants interleaved page by page (this bench before 2026-12-06, --limit 150) the sandbox measured 50.6
docs/CPU-s on articles and the job in-process 56.1; in its own passes after the warm pass, 59.7 and 60.7.  The
cost is CPU time (`time.process_time`), so docs per CPU-second is docs/s on one core whatever else the machine runs:
- rs-trafilatura alone: `rs_trafilatura.extract(text, url=url)` with its defaults (its own page-type
  classifier), on text decoded beforehand: the extractor's own cost, the strictest baseline;
- plain trafilatura: `trafilatura.extract(html)` on the bytes (bench/extraction_quality.py's baseline);
- the job in-process: `jobs.text.main_text.extract_document`, all of it (checks, decoding, hints,
  rs-trafilatura, resiliparse, the trafilatura fallback, lines), as `extract.sandbox=false` runs it;
- the job in its sandbox: `ExtractionSandbox`, this process's CPU for the round trip plus the child's.
- with `--compare FILE`, another version of jobs/text/main_text.py run in-process as one more variant (a before/after
  in one process: `git show REF:jobs/text/main_text.py > /tmp/before.py`).
Printed: docs/CPU-s per variant and set, and the job's ratio to each baseline.  `--profile` then runs the
job in-process under cProfile per set and prints its cost per component (ms per page) and the top functions.
Quality is bench/extraction_quality.py's (end to end through `python -m jobs.text.extract_files`).

Measured 2026-12-06, --limit 150 --profile: articles rs-trafilatura alone 58.1, plain trafilatura 34.5, the job
in-process 53.0, in its sandbox 48.9 docs/CPU-s; per article page rs-trafilatura 13.0 ms of the job's 19.2, the
trafilatura fallback 3.35 (it runs on 7 of the 150), resiliparse's words 1.56.  A second run the same hour: 63.2 /
39.1 / 59.1 / 56.1.  The machine's speed moves these by 10 %; the ratios hold (the job in its sandbox 1.42-1.44x plain
trafilatura).  A speed lever measured no-go (a scratch run on WCXB dev's 171 pages that need the fallback): trafilatura
with `fast=True` (no readability/jusText backup inside it) costs 36 % less CPU there, but the job loses 0.005 F1 on
articles (0.947 -> 0.942) and 0.002 on mixed pages.
Another, 2026-12-06 (scratch runs): rs-trafilatura's cost does not follow the page's bytes.  Cutting `<script>` and
`<style>` blocks out (JSON-LD kept) left 105 of 256 KB per article but took rs-trafilatura from 15.7 to 13.6 ms a page,
less than the cut costs (a regex 1.6 ms; `str.find` over a lowered copy 2.4 ms): over all of WCXB dev the job went
32.2 -> 27.5 and 30.5 -> 28.1 docs/CPU-s (two runs), with F1 0.9465 / 0.7784 -> 0.9465 / 0.7782.  No-go.
"""
from __future__ import annotations

import argparse
import cProfile
import gzip
import importlib.util
import logging
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extraction_quality import DATA, load_wcxb_dev, wcxb_scorer  # noqa: E402
from jobs.config import load_jobs_config  # noqa: E402
from jobs.text.decode import decode_html  # noqa: E402
from jobs.text.main_text import extract_document  # noqa: E402
from jobs.text.sandbox import ExtractionSandbox  # noqa: E402

GOAL_ARTICLES = 60.0  # docs per CPU-second on articles (issue 11 §1)
# cProfile rows (file part, function) whose cumulative time is one component of the job, in pipeline order
COMPONENTS = (("nesting check", "main_text.py", "nesting_depth"), ("decoding", "decode.py", "decode_html"),
              ("binary check", "main_text.py", "control_chars"), ("page-type hint", "page_type.py", "page_type_hint"),
              ("rs-trafilatura", "~", "<built-in method rs_trafilatura._core.extract>"),
              ("resiliparse words", "main_text.py", "_resiliparse_words"),
              ("trafilatura fallback", "main_text.py", "_trafilatura"),
              ("repeated lines", "lines.py", "drop_repeated_lines"))


def load_sets(limit: int | None) -> dict:
    """{"articles": [(html bytes, decoded text, url)], "mixed": [...]} from WCXB dev."""
    sets = {"articles": [], "mixed": []}
    for page in load_wcxb_dev(wcxb_scorer()):
        pages = sets["articles" if page.page_type == "article" else "mixed"]
        if limit is None or len(pages) < limit:
            html = gzip.decompress(page.html_gz.read_bytes())
            pages.append((html, decode_html(html).text, page.url))
    return sets


def load_main_text(path: Path):
    """Another version of jobs/text/main_text.py as a module of its own (it imports the rest of `jobs` as it is)."""
    spec = importlib.util.spec_from_file_location("compared_main_text", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up here
    spec.loader.exec_module(module)
    return module


def variants(cfg, sandbox: ExtractionSandbox, compare: Path | None = None) -> dict:
    """name -> run(html, text, url), each timed by the caller with process_time (the sandbox's child adds its own)."""
    import rs_trafilatura
    import trafilatura

    def plain_trafilatura(html, _text, _url):
        try:
            trafilatura.extract(html)
        except Exception:  # plain use: whatever it raises is an empty result, as in extraction_quality.py
            pass

    return {"rs-trafilatura alone": lambda _html, text, url: rs_trafilatura.extract(text, url=url),
            "plain trafilatura": plain_trafilatura,
            "job in-process": lambda html, _text, url: extract_document(html, 200, "text/html", None, url, cfg),
            "job in its sandbox": lambda html, _text, url: sandbox.extract(html, 200, "text/html", None, url),
            **({f"{compare.name} in-process": lambda html, _text, url, other=load_main_text(compare).extract_document:
                other(html, 200, "text/html", None, url, cfg)} if compare else {})}


def measure(pages: list, runs: dict, sandbox: ExtractionSandbox, passes: int = 4) -> dict:
    """name -> CPU seconds over `pages` (per pass, the mean of `passes`), each variant in its own pass over the
    set, the order of the variants reversed from pass to pass."""
    names = list(runs)
    spent = dict.fromkeys(names, 0.0)
    for k in range(passes):
        for name in names if k % 2 == 0 else names[::-1]:
            child_before, started = sandbox.cpu_seconds(), time.process_time()
            for html, text, url in pages:
                runs[name](html, text, url)
            spent[name] += time.process_time() - started
            if name == "job in its sandbox":  # the child's CPU: extraction and unpickling
                spent[name] += sandbox.cpu_seconds() - child_before
    return {name: seconds / passes for name, seconds in spent.items()}


def print_speeds(name: str, pages: list, spent: dict) -> None:
    rate = {variant: len(pages) / seconds for variant, seconds in spent.items()}
    print(f"\n{name}: {len(pages)} pages, {sum(len(p[0]) for p in pages) / len(pages) / 1e3:.0f} KB of HTML on average")
    for variant, value in rate.items():
        print(f"  {variant:<22}{value:7.1f} docs/CPU-s  {1e3 / value:6.2f} ms/page")
    for job in ("job in-process", "job in its sandbox"):
        print(f"  {job} / rs-trafilatura alone {rate[job] / rate['rs-trafilatura alone']:.2f}, "
              f"/ plain trafilatura {rate[job] / rate['plain trafilatura']:.2f}")
    for compared in [variant for variant in rate if variant.endswith(".py in-process")]:
        print(f"  job in-process / {compared} {rate['job in-process'] / rate[compared]:.3f}")
    if name == "articles":
        value = rate["job in its sandbox"]
        print(f"  goal: {value:.1f} >= {GOAL_ARTICLES:.0f} docs/CPU-s on articles (the job as it runs, in its sandbox): "
              f"{'met' if value >= GOAL_ARTICLES else 'MISSED'} on this machine now")


def print_profile(name: str, pages: list, cfg, top: int = 12) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for html, _text, url in pages:
        extract_document(html, 200, "text/html", None, url, cfg)
    profiler.disable()
    stats = pstats.Stats(profiler)
    per_page = lambda seconds: 1e3 * seconds / len(pages)
    print(f"\n{name}: the job in-process under cProfile (its overhead included), ms per page")
    accounted = 0.0
    for label, file_part, function in COMPONENTS:
        seconds = sum(row[3] for (file, _line, func), row in stats.stats.items()
                      if func == function and file.endswith(file_part))
        accounted += seconds
        print(f"  {label:<22}{per_page(seconds):7.2f}")
    print(f"  {'everything else':<22}{per_page(stats.total_tt - accounted):7.2f}")
    print(f"  {'total':<22}{per_page(stats.total_tt):7.2f}")
    print(f"  top {top} functions by own time:")
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
    for (file, line, func), (_cc, calls, own, cumulative, _callers) in rows:
        where = func if file == "~" else f"{Path(file).name}:{line}({func})"
        print(f"    {per_page(own):7.2f} own {per_page(cumulative):7.2f} cumulative {calls:7d} calls  {where}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="at most this many pages per set (a quick run)")
    parser.add_argument("--profile", action="store_true", help="also profile the job in-process, per component")
    parser.add_argument("--compare", type=Path, help="another main_text.py to run in-process beside the job (before/after)")
    args = parser.parse_args()
    if wcxb_scorer() is None:
        print(f"skipped: {DATA / 'wcxb_dev'} is absent (the shared data set is not beside this checkout)")
        return 0
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    cfg = load_jobs_config().extract
    sets = load_sets(args.limit)
    with ExtractionSandbox(cfg) as sandbox:
        runs = variants(cfg, sandbox, args.compare)
        for run in runs.values():  # imports, the child's start and its first pass, untimed
            for page in sets["articles"]:
                run(*page)
        for name, pages in sets.items():
            print_speeds(name, pages, measure(pages, runs, sandbox))
    if args.profile:
        for name, pages in sets.items():
            print_profile(name, pages, cfg)
    return 0


if __name__ == "__main__":  # the sandbox's spawn child re-imports this module: keep work under the guard
    sys.exit(main())
