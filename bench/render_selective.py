"""Benchmark: selective JavaScript rendering (issue 10): the rule's precision/recall and what rendering costs.

    .venv/bin/python bench/render_selective.py [--real-limit N] [--no-crawl] [--no-real] [--renders 12]

1. The rule on a labelled set from the local web (localweb with js_hosts=true): every HTML page of the generated
   web; positives are the pages whose text appears only after JavaScript (truth kinds js-csr, js-spa, js-scroll),
   negatives every other page (server-rendered articles, indexes, and the JS hosts' /about.html that carry a
   script).  The trouble host's hostile pages are left out of P/R (they are shells a render must fail on).
2. The rule on real pages (../shared/data/extraction: trafilatura's eval set, WCXB dev, readability's test pages):
   each was annotated from its plain HTML, so none needs a browser: the share sent to it is the false-positive rate
   on the real web, by reason.  Skipped when the data is absent.
3. Cost, in this process on the same machine: plain fetches of the JS hosts' pages through the local web's proxy
   against renders of the same pages in the pool (crawl.render.pages pages at once): pages per second and ratio.
4. Two crawls of the whole local web, rendering off then on (`python -m spider.crawl -o render.enabled=...`, every
   other setting from conf/crawl.yaml, 1 s per-host delay included): pages/s of each and their ratio, and for the
   rendering crawl pages rendered / pages fetched, render outcomes, and the visible text rendering added.
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "spider"))

from localweb import LocalWeb, load_config  # noqa: E402
from localweb.js_sites import NEEDS_RENDER_KINDS  # noqa: E402
from spider.config import load_crawl_config  # noqa: E402
from spider.render.gate import SubrequestGate  # noqa: E402
from spider.render.pool import RenderPool  # noqa: E402
from spider.render.rule import needs_render  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "extraction"
WEB = ["js_hosts=true", "slow_page_seconds=0.5", "large_page_bytes=200000"]


def labelled_local(web) -> list[tuple[str, bytes, bool]]:
    out = []
    for url, page in web.truth.pages.items():
        if page.kind == "js-hostile" or page.status != 200:
            continue
        host, path = url.split("/", 3)[2], "/" + url.split("/", 3)[3]
        response = web.respond(host, path)
        if response is None or "html" not in (response.header("Content-Type") or ""):
            continue
        body = gzip.decompress(response.body) if response.header("Content-Encoding") == "gzip" else response.body
        out.append((url, body, page.kind in NEEDS_RENDER_KINDS))
    return out


def precision_recall(rows, cfg) -> dict:
    tp = fp = fn = tn = 0
    reasons: Counter = Counter()
    misses = []
    for url, body, positive in rows:
        decision = needs_render(body, cfg)
        reasons[decision.reason] += 1
        if decision.render and positive:
            tp += 1
        elif decision.render:
            fp += 1
            misses.append(("false positive", url, decision.reason))
        elif positive:
            fn += 1
            misses.append(("false negative", url, decision.reason))
        else:
            tn += 1
    return {"pages": len(rows), "positives": tp + fn, "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "reasons": dict(reasons.most_common()), "misses": misses[:10]}


def real_pages(limit: int):
    files = sorted(DATA.glob("trafilatura_eval/eval/*.html.gz")) + sorted(DATA.glob("wcxb_dev/dev/html/*.html.gz")) \
        + sorted(DATA.glob("readability_testpages/pages/*/source.html.gz"))
    return files[:limit] if limit else files


def real_rate(files, cfg) -> dict:
    sent: Counter = Counter()
    by_set: Counter = Counter()
    sent_by_set: Counter = Counter()
    examples = []
    started = time.perf_counter()
    for path in files:
        subset = path.relative_to(DATA).parts[0]
        by_set[subset] += 1
        decision = needs_render(gzip.decompress(path.read_bytes()), cfg)
        if decision.render:
            sent[decision.reason] += 1
            sent_by_set[subset] += 1
            if len(examples) < 8:
                s = decision.signals
                examples.append(f"{path.relative_to(DATA)}: {decision.reason} (text {s.visible_chars} chars of "
                                f"{s.html_bytes} bytes, mount {s.empty_mount!r}, bootstrap {s.bootstrap!r})")
    seconds = time.perf_counter() - started
    total = sum(sent.values())
    return {"pages": len(files), "sent_to_browser": total, "rate": round(total / len(files), 4) if files else None,
            "by_reason": dict(sent), "by_set": {k: f"{sent_by_set[k]}/{n}" for k, n in by_set.items()},
            "rule_ms_per_page": round(1000 * seconds / max(len(files), 1), 2), "examples": examples}


def plain_fetch(proxy: str, urls: list[str]) -> float:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    started = time.perf_counter()
    for url in urls:
        with opener.open(url, timeout=10) as response:
            response.read()
    return time.perf_counter() - started


async def render_all(cfg, proxy: str, pages: list[tuple[str, bytes]]) -> tuple[float, Counter]:
    pool = RenderPool(cfg, SubrequestGate(0.0, "weblm-bench"), proxy=proxy, user_agent="weblm-bench")
    await pool.start()
    started = time.perf_counter()
    results = await asyncio.gather(*(pool.render(url, body) for url, body in pages))
    seconds = time.perf_counter() - started
    await pool.close()
    return seconds, Counter(r.failure or "ok" for r in results)


def cost(web, cfg, renders: int) -> dict:
    positives = [(u, b) for u, b, p in labelled_local(web) if p]
    pages = [positives[i % len(positives)] for i in range(renders)]
    urls = [u for u, _ in pages]
    plain_fetch(web.proxy_url, urls[:2])  # warm the proxy's connections
    plain_s = plain_fetch(web.proxy_url, urls)
    render_s, outcomes = asyncio.run(render_all(cfg, web.proxy_url, pages))
    return {"pages": len(pages), "plain_pages_per_s": round(len(pages) / plain_s, 1),
            "render_pages_per_s": round(len(pages) / render_s, 2), "render_pool_pages": cfg.pages,
            "render_over_plain": round((len(pages) / render_s) / (len(pages) / plain_s), 4),
            "render_outcomes": dict(outcomes)}


def crawl(web, render: bool) -> dict:
    from crawl_helpers import run_crawl

    with tempfile.TemporaryDirectory() as tmp:
        run = run_crawl(web.seeds, Path(tmp), ["proxy=" + web.proxy_url, f"render.enabled={str(render).lower()}",
                                               "max_pages_per_host=40", "depth_limit=4"], timeout=900)
    stats, render_stats = run.stats, run.stats.get("render", {})
    fetched = stats.get("pages_fetched") or 0
    out = {"render": render, "returncode": run.returncode, "elapsed_s": round(stats.get("elapsed_s", 0.0), 1),
           "pages_fetched": fetched, "pages_per_s": round(fetched / max(stats.get("elapsed_s", 0.0), 1e-9), 2)}
    if render:
        out.update({"html_pages_checked": render_stats.get("html_pages", 0),
                    "pages_rendered": render_stats.get("renders", 0),
                    "rendered_over_fetched": round(render_stats.get("renders", 0) / max(fetched, 1), 4),
                    "renders_ok": render_stats.get("ok", 0),
                    "render_failures": {k[7:]: v for k, v in render_stats.items() if k.startswith("failed/")},
                    "text_chars_gained": render_stats.get("text_chars_gained", 0),
                    "conversion_records": render_stats.get("recorded", 0),
                    "render_seconds_total": round(render_stats.get("seconds_ms", 0) / 1000, 1),
                    "subrequests": render_stats.get("subrequests", 0),
                    "subrequests_blocked": {k[8:]: v for k, v in render_stats.items() if k.startswith("blocked/")},
                    "decisions": {k[8:]: v for k, v in render_stats.items() if k.startswith("decided/")}})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real-limit", type=int, default=0, help="at most this many real pages (0: all)")
    ap.add_argument("--renders", type=int, default=12, help="pages rendered for the cost figure")
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--no-crawl", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_crawl_config(["render.enabled=true"]).render
    report = {"rule": {k: getattr(cfg, k) for k in ("min_html_bytes", "thin_text_chars", "spa_text_chars",
                                                      "min_text_ratio")}}
    with LocalWeb(load_config(WEB)) as web:
        report["local_web"] = precision_recall(labelled_local(web), cfg)
        print("local web:", json.dumps(report["local_web"]), flush=True)
        if args.no_real or not DATA.exists():
            report["real_pages"] = "skipped (../shared/data/extraction absent or --no-real)"
        else:
            report["real_pages"] = real_rate(real_pages(args.real_limit), cfg)
        print("real pages:", json.dumps(report["real_pages"]), flush=True)
        report["cost"] = cost(web, cfg, args.renders)
        print("cost:", json.dumps(report["cost"]), flush=True)
        if not args.no_crawl:
            for render in (False, True):  # same web, same settings; only crawl.render.enabled differs
                report[f"crawl_render_{render}"] = crawl(web, render)
                print(f"crawl (render {'on' if render else 'off'}):", json.dumps(report[f"crawl_render_{render}"]),
                      flush=True)
            on, off = report["crawl_render_True"], report["crawl_render_False"]
            print("crawl pages/s render on / off:", round(on["pages_per_s"] / max(off["pages_per_s"], 1e-9), 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
