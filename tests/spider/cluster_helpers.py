"""Helpers for the multi-process crawl tests: crawl workers as real `python -m spider.crawl` processes sharing
one frontier (Redis or Redis Cluster), the ground truth of a small localweb computed by walking its links, and
what the server saw and the WARC files hold, to compare with it.

Nothing here imports the spider: the truth comes from the web's own answers (`LocalWeb.respond`), read the way
any link-following crawler reads them (Scrapy's LinkExtractor, robots.txt by Protego for the crawler's token).
"""
from __future__ import annotations

import gzip
import json
import signal
import subprocess
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

from protego import Protego
from scrapy.http import HtmlResponse
from scrapy.linkextractors import LinkExtractor
from warcio.archiveiterator import ArchiveIterator

from crawl_helpers import ROOT, crawl_command, env, read_warc

ROBOTS_TOKEN = "weblm-spider"          # the product token of conf/crawl.yaml's user_agent
CAPTURES = ("response", "revisit")      # a fetch is stored as one of these (revisit: a payload stored before)


# ---- the ground truth of a generated localweb -------------------------------------------------------------
@dataclass
class Reachable:
    """What a polite crawl from `seeds` must request: `urls` (URL -> the status it answers), robots.txt once per
    host in `robots`, never anything in `disallowed`."""
    urls: dict[str, int] = field(default_factory=dict)
    disallowed: set[str] = field(default_factory=set)
    robots: set[str] = field(default_factory=set)       # hosts whose robots.txt is asked
    depth: dict[str, int] = field(default_factory=dict)


def reachable(web, seeds: list[str]) -> Reachable:
    """Breadth-first walk over the web's answers from `seeds`: links and redirects inside the seeds' hosts, minus
    what each host's robots.txt disallows (a 5xx robots.txt: the whole host, RFC 9309 §2.3.1.4)."""
    hosts = {urlsplit(s).hostname for s in seeds}
    extractor = LinkExtractor(allow_domains=sorted(hosts), unique=True)
    robots: dict[str, Protego | None | bool] = {}

    def allowed(url: str) -> bool:
        host = urlsplit(url).hostname
        if host not in robots:
            answer = web.respond(host, "/robots.txt")
            if answer.status >= 500 or answer.status == 429:
                robots[host] = False
            elif 200 <= answer.status < 300:
                robots[host] = Protego.parse(answer.body.decode("utf-8", "replace"))
            else:
                robots[host] = None
        rules = robots[host]
        if rules is False:
            return False
        return rules is None or rules.can_fetch(url, ROBOTS_TOKEN)

    out = Reachable()
    queue: deque[tuple[str, int]] = deque((s, 0) for s in seeds)
    seen = set(seeds)
    while queue:
        url, depth = queue.popleft()
        parts = urlsplit(url)
        out.robots.add(parts.hostname)
        if not allowed(url):
            out.disallowed.add(url)
            continue
        target = parts.path + ("?" + parts.query if parts.query else "")
        answer = web.respond(parts.hostname, target)
        out.urls[url] = answer.status
        out.depth[url] = depth
        found: list[str] = []
        if 300 <= answer.status < 400 and answer.header("Location"):
            found = [urljoin(url, answer.header("Location"))]
        elif 200 <= answer.status < 300 and "html" in (answer.header("Content-Type") or ""):
            body = answer.body
            if answer.header("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            page = HtmlResponse(url, body=body, headers={"Content-Type": answer.header("Content-Type")})
            found = [urldefrag(link.url).url for link in extractor.extract_links(page)]
        for link in found:
            if urlsplit(link).hostname in hosts and link not in seen:
                seen.add(link)
                queue.append((link, depth + 1))
    return out


def requested(hits) -> Counter:
    """URL -> requests that reached the server (localweb's Hits), robots.txt included."""
    return Counter(f"http://{hit.host}{hit.target}" for hit in hits.log())


# ---- the workers ------------------------------------------------------------------------------------------
@dataclass
class Worker:
    index: int
    dir: Path
    proc: subprocess.Popen
    started: float
    log_file: object = None
    returncode: int | None = None
    ended: float | None = None

    @property
    def warc_dir(self) -> Path:
        return self.dir / "warc"

    @property
    def log(self) -> str:
        path = self.dir / "crawl.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def stats(self) -> dict:
        path = self.dir / "stats.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def closed_files(self) -> list[Path]:
        return sorted(self.warc_dir.glob("*.warc.gz"))

    def open_files(self) -> list[Path]:
        return sorted(self.warc_dir.glob("*.open"))

    def wait(self, timeout: float) -> int:
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)   # do not leave a crawl running behind a failed test
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError(f"worker {self.index} still running after {timeout:.0f} s; log tail:\n"
                                 f"{self.log[-3000:]}")
        finally:
            if self.ended is None:
                self.ended = time.monotonic()
            if self.log_file is not None:
                self.log_file.close()
                self.log_file = None
        return self.returncode

    def stall(self, seconds: float) -> None:
        """SIGSTOP, then SIGCONT: the process freezes whole (a long GC pause, a VM migration) and wakes up with
        everything it had in hand."""
        self.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: nothing runs after it (no WARC closing, no acknowledgements, no lease hand-back)."""
        self.proc.kill()
        self.returncode = self.proc.wait(timeout=20)
        self.ended = time.monotonic()
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None


def start_worker(index: int, run: Path, seeds_file: Path, seeds: list[str] | None, overrides: list[str]) -> Worker:
    """One `python -m spider.crawl` process with its own folder (WARC files, stats, log, paths.var); seeds None:
    started without any, joining the crawl the others seeded."""
    here = run / f"worker-{index}"
    here.mkdir(parents=True, exist_ok=True)
    cmd = crawl_command(seeds, here, [f"paths.var={here / 'var'}", *overrides], seeds_at=str(seeds_file))
    log = open(here / "crawl.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT)
    return Worker(index, here, proc, time.monotonic(), log)


def wait_all(workers: list[Worker], timeout: float) -> None:
    """Wait for every worker, noting each one's exit time as it happens (for the stop-on-time checks)."""
    deadline = time.monotonic() + timeout
    while any(w.proc.poll() is None for w in workers) and time.monotonic() < deadline:
        for w in workers:
            if w.ended is None and w.proc.poll() is not None:
                w.ended = time.monotonic()
        time.sleep(0.05)
    for w in workers:
        w.wait(max(1.0, deadline - time.monotonic()))


def stop_all(workers: list[Worker]) -> None:
    """Teardown: any worker still running is stopped (the test has already failed)."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait(timeout=20)
        if w.log_file is not None:
            w.log_file.close()
            w.log_file = None


# ---- what the WARC files hold ---------------------------------------------------------------------------
def captures(paths: list[Path]) -> Counter:
    """Target URI -> response/revisit records in these files."""
    out: Counter = Counter()
    for path in paths:
        for rec in read_warc(path):
            if rec["type"] in CAPTURES:
                out[rec["headers"].get_header("WARC-Target-URI")] += 1
    return out


def captures_so_far(path: Path) -> Counter:
    """Target URI -> response/revisit records in a file still being written (or cut off by a kill): the whole
    records before its end; the record being written when it ended is left out."""
    out: Counter = Counter()
    try:
        with open(path, "rb") as stream:
            for rec in ArchiveIterator(stream):
                if rec.rec_type in CAPTURES:
                    uri = rec.rec_headers.get_header("WARC-Target-URI")
                    rec.raw_stream.read()   # a record is whole only once its block reads to the end
                    out[uri] += 1
    except Exception:  # noqa: BLE001  (the cut-off tail of a killed writer's file)
        pass
    return out


def wait_for(condition, timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def min_gaps(hits, hosts) -> dict[str, float]:
    """Per host: the shortest time between two consecutive requests arriving at the server."""
    out = {}
    for host in hosts:
        log = hits.log(host)
        gaps = [b.at - a.at for a, b in zip(log, log[1:])]
        if gaps:
            out[host] = min(gaps)
    return out

