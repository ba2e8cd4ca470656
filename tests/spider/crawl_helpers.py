"""Run `python -m spider.crawl` in a subprocess (Scrapy's reactor starts once per process) and read its output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

import storage

ROOT = Path(__file__).resolve().parents[2]

# Small and fast, but every politeness mechanism still on.
# frontier.tdmrep off: each test pins the fetches of the behaviour it checks; tests/spider/test_tdmrep_fetch.py turns it on
FAST = ["download_delay_s=0.01", "randomize_delay=false", "download_timeout_s=2", "retry_times=1",
        "progress_interval_s=1", "log_level=INFO", "frontier.ssrf_allow=[127.0.0.1]", "frontier.tdmrep=off"]


@dataclass
class CrawlRun:
    returncode: int
    stats: dict
    warc_files: list[Path]
    log: str


def crawl_command(seeds: list[str] | None, tmp: Path, overrides: list[str], warc_dir: str = "",
                  stats: str = "", seeds_at: str = "") -> list[str]:
    """WARC files go to `warc_dir` (default tmp/warc), the counters to `stats` (default tmp/stats.json);
    the seed file is written at `seeds_at` (a path or URI; default tmp/seeds.txt).  No seeds (None): a worker
    joining a shared frontier, started without --seeds and with a paths.seeds that does not exist."""
    cmd = [sys.executable, "-m", "spider.crawl"]
    if seeds is None:
        cmd += ["-o", f"paths.seeds={tmp / 'no-seeds.txt'}"]
    else:
        seed_file = seeds_at or str(tmp / "seeds.txt")
        storage.write_text(seed_file, "# test seeds\n" + "\n".join(seeds) + "\n")
        cmd += ["--seeds", seed_file]
    cmd += ["--warc-dir", warc_dir or str(tmp / "warc"), "--stats", stats or str(tmp / "stats.json")]
    # each crawl its own frontier (the embedded one lives under paths.local by default, shared by every run)
    cmd += ["-o", f"frontier.url=sqlite:///{tmp / 'frontier.db'}"]
    for item in FAST + overrides:
        cmd += ["-o", item]
    return cmd


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def run_crawl(seeds: list[str], tmp: Path, overrides: list[str], timeout: float = 90, **where: str) -> CrawlRun:
    proc = subprocess.run(crawl_command(seeds, tmp, overrides, **where), cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)
    return finished(proc.returncode, tmp, proc.stdout + proc.stderr)


@contextmanager
def background_crawl(cmd: list[str], tmp: Path):
    """The crawl runs while the block does, its output in tmp/crawl.log; killed if the block leaves early."""
    log = tmp / "crawl.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc, log
        finally:
            proc.kill()


def wait_for_request(server, path: str, log: Path, timeout: float = 30) -> None:
    """Until the raw server has received `path` from the crawl."""
    deadline = time.monotonic() + timeout
    while path not in server.received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path in server.received, f"the crawl never asked for {path}: " + log.read_text()[-3000:]


def finished(returncode: int, tmp: Path, log: str) -> CrawlRun:
    stats_path = tmp / "stats.json"
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    return CrawlRun(returncode, stats, sorted((tmp / "warc").glob("*")), log)


def read_warc(path: Path | str) -> list[dict]:
    """Every record of a file (a path or a URI), its raw payload (as stored) and whether warcio's digest check passed."""
    out = []
    with storage.open_file(str(path), "rb") as stream:
        for rec in ArchiveIterator(stream, check_digests=True):
            out.append({"type": rec.rec_type, "headers": rec.rec_headers, "http": rec.http_headers,
                        "raw": rec.raw_stream.read(), "digest_ok": rec.digest_checker.passed})
    return out
