"""Benchmark: politeness and coverage of real crawls of the adversarial web, judged at the server.

    .venv/bin/python bench/crawl_politeness.py [--frontier redis|embedded|stock] [--workers 2]
                                               [--seconds 120] [--delay 1] [-o key=value ...] [--keep DIR]

Reproduces the outside harness: 26 hosts (localweb.politeness_web), N `python -m spider.crawl` processes
through its proxy at a `--delay` s download delay, each closing after `--seconds`; then every request
the server saw is judged (localweb.judge): politeness, Retry-After and robots violations, coverage of
the reachable allowed pages, duplicate fetches, requests per host, and each worker's wall time against
close_after_seconds (a crawl that ignores its deadline keeps hammering hosts after it).

--frontier stock: Scrapy's own scheduler (`-o scheduler=scrapy.core.scheduler.Scheduler`), one worker:
the baseline.  embedded: the frontier in SQLite under one shared paths.var.  redis: a fresh Debian
`redis-server` on a free loopback port (no persistence), shared by all workers.
Everything of a run (logs, WARC files, stats, the request log, the verdict) is kept under --keep or a
temp folder, named at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localweb.hostile import hostile_config  # noqa: E402
from localweb.judge import judge  # noqa: E402
from localweb.politeness_web import PolitenessWeb, dump_hits  # noqa: E402
from tests.support.redisserver import RedisServer  # noqa: E402  (the tests' redis-server runner)

STOCK_SCHEDULER = "scrapy.core.scheduler.Scheduler"


def worker_command(i: int, run: Path, seeds: Path, proxy: str, args: argparse.Namespace, frontier_url: str) -> list[str]:
    here = run / f"worker-{i}"
    here.mkdir(parents=True, exist_ok=True)
    overrides = [f"proxy={proxy}", f"download_delay_s={args.delay}", f"close_after_seconds={args.seconds}",
                 f"paths.var={run / 'var'}"]   # one var (and local) for all: the embedded frontier is shared there
    if args.frontier == "stock":
        overrides.append(f"scheduler={STOCK_SCHEDULER}")
    else:
        overrides.append(f"frontier.url={frontier_url}")
    cmd = [sys.executable, "-m", "spider.crawl", "--seeds", str(seeds), "--warc-dir", str(here / "warc"),
           "--stats", str(here / "stats.json")]
    for item in overrides + args.override:
        cmd += ["-o", item]
    return cmd


def run_workers(commands: list[list[str]], run: Path, seconds: float) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for i, cmd in enumerate(commands):
        log = open(run / f"worker-{i}" / "crawl.log", "w")
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log,
                      time.monotonic()))
    deadline = time.monotonic() + seconds + 180   # close_after_seconds, then the crawl's own timeouts and WARC closing
    results = []
    for i, (proc, log, started) in enumerate(procs):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"worker {i} still running {seconds + 180:.0f} s after start: SIGTERM", file=sys.stderr)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        stats_file = run / f"worker-{i}" / "stats.json"
        stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        results.append({"worker": i, "returncode": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
                        "finish_reason": stats.get("finish_reason"), "pages_fetched": stats.get("pages_fetched"),
                        "requests": stats.get("requests"), "robots_denied": stats.get("robots_denied"),
                        "errors": stats.get("errors", {}), "log": str(run / f"worker-{i}" / "crawl.log")})
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frontier", choices=("redis", "embedded", "stock"), default="redis")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=120, help="close_after_seconds of every worker")
    parser.add_argument("--delay", type=float, default=1.0, help="download_delay_s: the gap the judge requires")
    parser.add_argument("--tolerance", type=float, default=0.05, help="clock slack the judge forgives per gap (s)")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="more crawl overrides for every worker, e.g. -o randomize_delay=false")
    parser.add_argument("--web", action="append", default=[], metavar="KEY=VALUE",
                        help="adversarial web overrides (localweb.hostile.config), e.g. --web slow_seconds=1")
    parser.add_argument("--keep", help="folder for everything of the run (default: a new temp folder)")
    args = parser.parse_args(argv)
    if args.frontier == "stock" and args.workers != 1:
        print("--frontier stock: Scrapy's scheduler cannot share a crawl; running 1 worker", file=sys.stderr)
        args.workers = 1
    run = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="crawl-politeness-"))
    run.mkdir(parents=True, exist_ok=True)

    redis_proc, frontier_url = (_redis(run / "redis") if args.frontier == "redis" else (None, ""))
    started = time.monotonic()
    try:
        with PolitenessWeb(hostile_config(args.web)) as web:
            seeds = run / "seeds.txt"
            seeds.write_text("# the adversarial web\n" + "\n".join(web.seeds) + "\n")
            print(f"{len(web.hosts)} hosts, {len(web.truth)} reachable allowed pages at {web.proxy_url}; "
                  f"{args.workers} worker(s), frontier {args.frontier} {frontier_url}, "
                  f"{args.seconds} s at {args.delay:g} s delay; run folder {run}", flush=True)
            commands = [worker_command(i, run, seeds, web.proxy_url, args, frontier_url) for i in range(args.workers)]
            workers = run_workers(commands, run, args.seconds)
            hits = web.hits.log()
    finally:
        if redis_proc is not None:
            redis_proc.stop()
    wall = time.monotonic() - started
    verdict = judge(hits, web.truth, args.delay, args.tolerance)
    dump_hits(hits, run / "hits.jsonl")
    web.truth.dump(run / "truth.json")
    (run / "verdict.json").write_text(json.dumps({"args": vars(args), "workers": workers, "summary": verdict.summary,
                                                  "violations": [asdict(v) for v in verdict.violations]}, indent=1))

    print(verdict.report())
    print()
    for w in workers:
        over = w["wall_s"] - args.seconds
        print(f"worker {w['worker']}: exit {w['returncode']}, {w['wall_s']:.1f} s wall for close_after_seconds="
              f"{args.seconds} ({over:+.1f} s), finish {w['finish_reason']}, {w['pages_fetched']} responses, "
              f"{w['requests']} requests, {w['robots_denied']} denied by robots, errors {w['errors']}")
    s = verdict.summary
    print(f"\nSUMMARY frontier={args.frontier} workers={args.workers} seconds={args.seconds} delay={args.delay:g}: "
          f"politeness {s['violations']['politeness']}, retry_after {s['violations']['retry_after']}, "
          f"robots {s['violations']['robots']} violations; coverage {s['coverage']['fraction']:.1%} "
          f"({s['coverage']['fetched']}/{s['coverage']['reachable']}); {s['duplicate_fetches']} duplicate fetches; "
          f"{s['trap_pages_fetched']} trap pages; {s['requests']} requests; bench wall {wall:.0f} s")
    print(f"run folder: {run} (hits.jsonl, truth.json, verdict.json, worker-*/crawl.log)")
    return 0 if all(w["returncode"] == 0 for w in workers) else 1


def _redis(workdir: Path) -> tuple[RedisServer, str]:
    server = RedisServer(workdir)
    return server, server.url


if __name__ == "__main__":
    sys.exit(main())
