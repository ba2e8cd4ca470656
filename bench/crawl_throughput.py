"""Benchmark: crawl throughput per process, the frontier (embedded, Redis) against stock Scrapy's scheduler.

    .venv/bin/python bench/crawl_throughput.py [--runs 3] [--pages-per-host 300] [--max-pages-per-host 1000]
                                               [--depth-limit 40] [--variants stock,embedded,redis] [--nagle]
                                               [--web key=value ...] [-o key=value ...] [--keep DIR]

One local web (localweb.LocalWeb, loopback proxy) with --pages-per-host articles on each content host and its
special pages made fast (no slow page, a small "large" page, no 429s, no Crawl-delay: stock Scrapy reads none),
so that what differs is the scheduling.  Its proxy's sockets get TCP_NODELAY (--nagle: not): it answers in two
writes, headers then body, and with Nagle on the body waits for the crawler's delayed ACK, ~40 ms stalls that
hit the variants unequally.  Each run is one `python -m spider.crawl` process at download delay 0
(`-o download_delay_s=0 -o randomize_delay=false`) with the same max_pages_per_host and depth_limit for every
variant (40 by default: stock Scrapy's queue is depth-first, the frontier's breadth-first, and only a limit
deeper than the site makes both fetch the same pages) and every other setting from conf/crawl.yaml
(concurrent_requests_per_host 1, retries, the frontier's error backoff):
  stock     `-o scheduler=scrapy.core.scheduler.Scheduler` (Scrapy's RobotsTxtMiddleware, DEPTH_LIMIT, UrlFilter)
  embedded  the frontier in a fresh SQLite file per run (`-o frontier.url=sqlite:///<run>/f.db`)
  redis     the frontier on a redis-server of this bench's own, a fresh namespace per run
The variants alternate, --runs times; pages/s = responses / elapsed, both from the stats JSON the crawl writes
(pages_fetched, elapsed_s).  Prints every run, the medians, and the ratios frontier/stock: target >= 0.9.
Also the crawl process's CPU per page, and from the responses' WARC-Dates the pace until 90 % of the responses
were in and the hosts that ended last: the crawl's body against its tail (news.<domain>'s always-500 page is
retried, and the frontier backs that host off 1 + 2 + 4 s: a guarantee stock Scrapy does not give).
With one request at a time per host and a handful of hosts, a crawl's pace is each host's round trip: the
host and page counts are printed with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localweb import LocalWeb, load_config  # noqa: E402
from tests.support.redisserver import RedisServer  # noqa: E402  (the tests' redis-server runner)

STOCK_SCHEDULER = "scrapy.core.scheduler.Scheduler"
VARIANTS = ("stock", "embedded", "redis")
TARGET_RATIO = 0.9
# the local web's deliberately slow or heavy answers off: they would measure the web, not the scheduler
FAST_WEB = ["slow_page_seconds=0", "large_page_bytes=20000", "rate_limited_responses=0", "crawl_delay_seconds=0"]


def crawl(variant: str, n: int, run: Path, seeds: Path, proxy: str, redis_url: str, args) -> dict:
    here = run / f"{n:02d}-{variant}"
    here.mkdir(parents=True)
    overrides = [f"proxy={proxy}", "download_delay_s=0", "randomize_delay=false", "frontier.ssrf_allow=[127.0.0.1]",
                 f"max_pages_per_host={args.max_pages_per_host}", f"depth_limit={args.depth_limit}",
                 "metrics.port=-1", f"paths.var={here / 'var'}"]
    if variant == "stock":
        overrides.append(f"scheduler={STOCK_SCHEDULER}")
    elif variant == "embedded":
        overrides.append(f"frontier.url=sqlite:///{here / 'f.db'}")
    else:
        overrides += [f"frontier.url={redis_url}", f"frontier.namespace=bench{n}"]
    cmd = [sys.executable, "-m", "spider.crawl", "--seeds", str(seeds), "--warc-dir", str(here / "warc"),
           "--stats", str(here / "stats.json")]
    for item in overrides + args.override:
        cmd += ["-o", item]
    started, cpu0 = time.monotonic(), _children_cpu()
    with open(here / "crawl.log", "w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                              stderr=subprocess.STDOUT, timeout=args.timeout)
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu0
    stats_file = here / "stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    if proc.returncode != 0 or not stats:
        raise SystemExit(f"{variant} run {n} failed (exit {proc.returncode}); see {here / 'crawl.log'}")
    pages, elapsed = stats["pages_fetched"], stats["elapsed_s"]
    times = timeline(here / "warc")
    return {"variant": variant, "run": n, "pages": pages, "elapsed_s": elapsed, "pages_per_s": pages / elapsed,
            "pages_per_s_90": times["pages_per_s_90"], "tail": times["tail"], "cpu_ms_per_page": cpu / pages * 1e3,
            "wall_s": wall, "requests": stats.get("requests"), "hosts": len(stats.get("hosts", {})),
            "robots_denied": stats.get("robots_denied"), "errors": sum(stats.get("errors", {}).values()),
            "finish_reason": stats.get("finish_reason")}


def _children_cpu() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timeline(warc_dir: Path) -> dict:
    """From the responses' WARC-Dates (microseconds): the pace until 90 % of the responses were in (the crawl's
    body, without its tail), and the two hosts that finished last (the tail: one host's backoff or queue)."""
    from datetime import datetime

    from warcio.archiveiterator import ArchiveIterator

    seen: list[tuple[float, str]] = []
    for path in sorted(warc_dir.glob("*.warc.gz")):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "response":
                    date = datetime.fromisoformat(record.rec_headers.get_header("WARC-Date").replace("Z", "+00:00"))
                    host = record.rec_headers.get_header("WARC-Target-URI").split("/")[2]
                    seen.append((date.timestamp(), host))
    seen.sort()
    if len(seen) < 10:
        return {"pages_per_s_90": float("nan"), "tail": ""}
    start = seen[0][0]
    k = int(0.9 * len(seen))
    last: dict[str, float] = {}
    for t, host in seen:
        last[host] = t - start
    ends = sorted(last.items(), key=lambda item: -item[1])[:2]
    return {"pages_per_s_90": k / max(1e-9, seen[k - 1][0] - start),
            "tail": ", ".join(f"{h} ends at {t:.1f} s" for h, t in ends)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant, alternating")
    parser.add_argument("--pages-per-host", type=int, default=300, help="articles per content host (localweb)")
    parser.add_argument("--max-pages-per-host", type=int, default=1000, help="the same budget for every variant")
    parser.add_argument("--depth-limit", type=int, default=40,
                        help="deep enough that stock Scrapy's depth-first order and the frontier's breadth-first one "
                             "fetch the same pages (at conf's 5, stock reaches ~60 %% of what the frontier does)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    parser.add_argument("--web", action="append", default=[], metavar="KEY=VALUE", help="more localweb overrides")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="more crawl overrides for every variant")
    parser.add_argument("--nagle", action="store_true",
                        help="leave Nagle's algorithm on in the local web's proxy (localweb's default): its header and "
                             "body writes then meet the client's delayed ACK, ~40 ms stalls that drown the scheduling")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one crawl may take")
    parser.add_argument("--keep", help="folder for logs, WARC files and stats (default: a temp folder, removed)")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if "stock" not in variants or not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: a subset of {','.join(VARIANTS)} that includes stock (the baseline)")

    if not args.nagle:
        # localweb.proxy answers with two writes (headers, then body) on a keep-alive connection: with Nagle on, the
        # body waits for the ACK of the headers, which the crawler delays up to 40 ms.  TCP_NODELAY, for this bench only.
        from localweb.proxy import ProxyHandler
        ProxyHandler.disable_nagle_algorithm = True
    run = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="crawl-throughput-"))
    run.mkdir(parents=True, exist_ok=True)
    redis_proc, redis_url = _redis(run / "redis") if "redis" in variants else (None, "")
    started = time.monotonic()
    results: list[dict] = []
    try:
        with LocalWeb(load_config([f"pages_per_host={args.pages_per_host}", *FAST_WEB, *args.web])) as web:
            seeds = run / "seeds.txt"
            seeds.write_text("# the local web\n" + "\n".join(web.seeds) + "\n")
            print(f"local web: {len(web.hosts)} hosts ({args.pages_per_host} articles per content host), "
                  f"{len(web.truth.pages)} known pages, {len(web.seeds)} seeds, at {web.proxy_url}; "
                  f"max_pages_per_host={args.max_pages_per_host}, depth_limit={args.depth_limit}, download delay 0, "
                  f"TCP_NODELAY {'off (--nagle)' if args.nagle else 'on'} in the local web, "
                  f"{os.cpu_count()} CPU core(s); run folder {run}", flush=True)
            for n in range(args.runs):
                for variant in variants:
                    r = crawl(variant, n, run, seeds, web.proxy_url, redis_url, args)
                    results.append(r)
                    print(f"  run {n} {variant:8s}: {r['pages']:5d} responses in {r['elapsed_s']:6.2f} s = "
                          f"{r['pages_per_s']:6.1f} pages/s  ({r['requests']} requests, {r['hosts']} hosts, "
                          f"{r['robots_denied']} denied by robots, {r['errors']} errors, {r['finish_reason']}, "
                          f"process wall {r['wall_s']:.1f} s, CPU {r['cpu_ms_per_page']:.1f} ms/page); first 90 % of "
                          f"responses at "
                          f"{r['pages_per_s_90']:.1f} pages/s; {r['tail']}", flush=True)
    finally:
        if redis_proc is not None:
            redis_proc.stop()

    medians = {v: {k: statistics.median(r[k] for r in results if r["variant"] == v)
                   for k in ("pages", "elapsed_s", "pages_per_s", "pages_per_s_90", "wall_s", "cpu_ms_per_page")} for v in variants}
    print(f"\nSUMMARY ({args.runs} run(s) each, alternating; bench wall {time.monotonic() - started:.0f} s)")
    for v in variants:
        m = medians[v]
        print(f"  {v:8s} median {m['pages_per_s']:6.1f} pages/s ({m['pages']:.0f} responses in {m['elapsed_s']:.2f} s; "
              f"process wall {m['wall_s']:.1f} s; crawl process CPU {m['cpu_ms_per_page']:.1f} ms/page); first 90 % of "
              f"responses: {m['pages_per_s_90']:.1f} pages/s")
    base = medians["stock"]["pages_per_s"]
    for v in variants:
        if v != "stock":
            ratio = medians[v]["pages_per_s"] / base
            print(f"  ratio {v}/stock: {ratio:.3f}  (target >= {TARGET_RATIO:.2f}: "
                  f"{'met' if ratio >= TARGET_RATIO else 'MISSED'}); first 90 % of responses: "
                  f"{medians[v]['pages_per_s_90'] / medians['stock']['pages_per_s_90']:.3f}")
    if not args.keep:
        shutil.rmtree(run, ignore_errors=True)
    return 0


def _redis(workdir: Path) -> tuple[RedisServer, str]:
    server = RedisServer(workdir)
    return server, server.url


if __name__ == "__main__":
    sys.exit(main())
