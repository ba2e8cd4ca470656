"""Benchmark: renders of one site's pages with the render cache of its scripts and stylesheets and without.

    PYTHONPATH=. .venv/bin/python bench/render_cache.py [--pages 8] [--files 6]

The render pool with conf/crawl.yaml's render settings and a sub-request gate at the crawl's own download_delay_s
(1 s), against a site served from this script on the local web: each page loads `--files` shared files (half
scripts, half stylesheets, as a site's bundle, vendor chunk and theme do) and one JSON answer of its own, and shows
its text only once they ran.  The same pages are rendered by two pools, one with the cache and one with it off
(render.cache_mb=0; a fresh pool each: nothing kept from before), the two pools' renders alternating page by page so
that the machine's load falls on both alike.  Printed (one JSON line): per pool, the mean seconds a render, the
first render's and the later ones', sub-requests sent, answers taken from the cache, how often the host was asked for
the shared files, and the pages whose text is in the DOM; and the later renders' ratio of seconds, cache off / on.

Measured (2026-12-06, this project's 2-core machine, conf's settings: 1 s delay; 8 pages):
| shared files | pool | first render | later, mean | sub-requests sent | from the cache | host asked for them | text |
|---|---|---|---|---|---|---|---|
| 6 (3 js, 3 css) | cache | 8.89 s | 1.85 s | 14 | 42 | 6 | 8 of 8 |
| 6 | no cache | 8.88 s | 7.91 s | 56 | 0 | 48 | 8 of 8 |
| 1 (a bundle, as the local web's SPA) | cache | 3.85 s | 1.86 s | 9 | 7 | 1 | 8 of 8 |
| 1 | no cache | 3.85 s | 2.85 s | 16 | 0 | 8 | 8 of 8 |
Later renders 4.28x and 1.53x faster: each shared file cost a render one host delay (1 s) it no longer waits; the host
is asked for each once per crawl process instead of once a page.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localweb import LocalWeb, load_config  # noqa: E402
from localweb.responses import Response  # noqa: E402
from spider.config import load_crawl_config  # noqa: E402
from spider.render.gate import SubrequestGate  # noqa: E402
from spider.render.pool import RenderPool  # noqa: E402

HOST = "trouble.weblm.test"


def site(web, files: int, pages: int) -> list[tuple[str, bytes, str]]:
    """Routes for the shared files and each page's data; returns (url, page, text) per page."""
    tags = []
    for i in range(files):
        if i % 2 == 0:
            path = f"/static/chunk-{i}.js"
            body = f"window.parts = (window.parts || 0) + 1; // chunk {i}\n" + "var pad = 0;\n" * 2000
            web.generated.routes[(HOST, path)] = Response(200, (("Content-Type", "text/javascript"),), body.encode())
            tags.append(f"<script src='{path}'></script>")
        else:
            path = f"/static/theme-{i}.css"
            body = f"/* theme {i} */\n" + "p { margin: 0 }\n" * 2000
            web.generated.routes[(HOST, path)] = Response(200, (("Content-Type", "text/css"),), body.encode())
            tags.append(f"<link rel='stylesheet' href='{path}'>")
    out = []
    for n in range(pages):
        text = f"Article {n} paragraph text, shown once the site's scripts have run. " * 5
        web.generated.routes[(HOST, f"/api/article-{n}.json")] = Response(
            200, (("Content-Type", "application/json"),), json.dumps({"text": text}).encode())
        page = (f"<html><head><title>a{n}</title>{''.join(tags)}</head><body><div id='root'></div><script>\n"
                f"fetch('/api/article-{n}.json').then(r => r.json()).then(d => {{\n"
                "  if (window.parts) document.getElementById('root').textContent = d.text; });\n"
                "</script></body></html>")
        out.append((f"http://{HOST}/article-{n}", page.encode(), text.strip()))
    return out


async def run(web, cfg, delay_s: float, pages) -> dict:
    pools = {name: RenderPool(dataclasses.replace(cfg, cache_mb=mb), SubrequestGate(delay_s, "weblm-bench"),
                              proxy=web.proxy_url, user_agent="weblm-bench")
             for name, mb in (("cache", cfg.cache_mb), ("no cache", 0))}
    results = {name: [] for name in pools}
    for pool in pools.values():
        await pool.start()
    try:
        for k, (url, page, text) in enumerate(pages):
            for name in (list(pools) if k % 2 == 0 else list(pools)[::-1]):
                web.hits.clear()
                result = await pools[name].render(url, page, 200, {"Content-Type": "text/html"})
                shared = sum(1 for h in web.hits.log() if h.target.startswith("/static/"))
                results[name].append((result, text.encode() in result.html, shared))
    finally:
        for pool in pools.values():
            await pool.close()
    out = {}
    for name, rows in results.items():
        seconds = [r.seconds for r, _, _ in rows]
        out[name] = {"mean_s": round(statistics.mean(seconds), 3), "first_s": round(seconds[0], 3),
                     "later_mean_s": round(statistics.mean(seconds[1:]), 3),
                     "subrequests": sum(r.subrequests for r, _, _ in rows),
                     "cached": sum(r.cached for r, _, _ in rows),
                     "shared_files_asked": sum(s for _, _, s in rows),
                     "text_in_dom": sum(ok for _, ok, _ in rows), "renders": len(rows)}
    out["later_renders_off_over_on"] = round(out["no cache"]["later_mean_s"] / out["cache"]["later_mean_s"], 2)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--files", type=int, default=6)
    args = parser.parse_args(argv)
    crawl = load_crawl_config(["render.enabled=true"])
    with LocalWeb(load_config(["js_hosts=true", "pages_per_host=2"])) as web:
        pages = site(web, args.files, args.pages)
        out = asyncio.run(run(web, crawl.render, crawl.download_delay_s, pages))
    print("render cache:", json.dumps({"delay_s": crawl.download_delay_s, "files": args.files, **out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
