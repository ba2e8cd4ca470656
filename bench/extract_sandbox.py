"""Benchmark: main-text extraction in the killable sandbox vs in-process (the baseline), same process.

    .venv/bin/python bench/extract_sandbox.py [N_PAGES]

Reads real pages from ../shared/data/extraction/trafilatura_eval (skips cleanly when absent), runs
`jobs.text.main_text.extract_document` in-process, then through `ExtractionSandbox`, and prints
docs/s for each and the ratio.  Target: the sandbox costs at most 10 % (ratio >= 0.90).
"""
from __future__ import annotations

import gzip
import sys
import time
from pathlib import Path

from jobs.config import load_jobs_config
from jobs.text.main_text import extract_document
from jobs.text.sandbox import ExtractionSandbox

EVAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "extraction" / "trafilatura_eval" / "eval"
TARGET_RATIO = 0.90


def main(n_pages: int) -> int:
    files = sorted(EVAL.glob("*.html.gz"))[:n_pages]
    if not files:
        print(f"skipped: no pages under {EVAL} (the shared data set is absent)")
        return 0
    pages = [(gzip.decompress(f.read_bytes()), f.name) for f in files]
    cfg = load_jobs_config().extract
    extract_document(pages[0][0], 200, "text/html", None, pages[0][1], cfg)  # warm imports and caches

    started = time.perf_counter()
    baseline = [extract_document(html, 200, "text/html", None, name, cfg) for html, name in pages]
    in_process = time.perf_counter() - started

    started = time.perf_counter()
    with ExtractionSandbox(cfg) as sandbox:
        sandboxed = [sandbox.extract(html, 200, "text/html", None, name) for html, name in pages]
    in_sandbox = time.perf_counter() - started

    megabytes = sum(len(html) for html, _ in pages) / 1e6
    ratio = in_process / in_sandbox
    print(f"{len(pages)} real pages, {megabytes:.1f} MB of HTML")
    print(f"in-process (baseline): {len(pages) / in_process:7.1f} docs/s")
    print(f"sandbox (incl. start): {len(pages) / in_sandbox:7.1f} docs/s")
    print(f"ratio sandbox/baseline: {ratio:.2f}  (target >= {TARGET_RATIO:.2f}: "
          f"{'met' if ratio >= TARGET_RATIO else 'MISSED'})")
    print(f"same results: {sandboxed == baseline}")
    return 0 if sandboxed == baseline else 1


if __name__ == "__main__":  # the sandbox's spawn child re-imports this module: keep work under the guard
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
