"""spider/warc_thread.py: fetches are written on the writer thread, in order, never dropped; a full queue
makes the caller wait (a Deferred), a failed write is reported and the thread goes on; stop drains first.

And in real crawls (spider/middlewares/warc_capture.py): metadata and revisit records, files closed by age
while the crawl idles, a writer slower than the fetches (the crawl waits, nothing is lost), and a write error
(a file size limit) that stops the crawl with whole files."""
from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import threading
import time

import pytest
from scrapy.core.scheduler import Scheduler

try:
    from crawl_helpers import (ROOT, background_crawl, crawl_command, env, finished, read_warc, run_crawl,
                               wait_for_request)
except ImportError:  # imported by a crawl's process for LocalDigestScheduler, where tests/spider is no path entry
    from tests.spider.crawl_helpers import (ROOT, background_crawl, crawl_command, env, finished, read_warc,
                                            run_crawl, wait_for_request)
from spider.warc import Fetch, LocalDigestIndex, RotatingWarcWriter, request_head, response_head
from spider.warc_thread import WarcWriterThread, WriterStopped


def fetch_of(i: int, body: bytes = b"") -> Fetch:
    url = f"http://a.weblm.test/{i}"
    return Fetch(url, request_head("GET", url, []), b"", response_head("HTTP/1.1", 200, []), body or str(i).encode())


class GatedWriter(RotatingWarcWriter):
    """Writes only while the gate is open, remembering which thread wrote what."""

    def __init__(self, folder, **kwargs):
        super().__init__(folder, "t", 10**9, {}, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.written: list[tuple[str, int]] = []

    def write(self, fetch, digests=None, capture=None):
        self.gate.wait(10)
        self.written.append((fetch.url, threading.get_ident()))
        return super().write(fetch, digests, capture)


def test_fetches_are_written_on_the_writer_thread_in_order(tmp_path):
    closed, notices = [], []
    writer = GatedWriter(tmp_path, on_closed=lambda c: closed.append((c, threading.get_ident())))
    thread = WarcWriterThread(writer, 100, on_written=lambda f, w: notices.append((f.url, w.record_id)))
    assert all(thread.submit(fetch_of(i)) is None for i in range(20))
    thread.stop()
    assert thread.join(10)
    caller = threading.get_ident()
    assert [url for url, _ in writer.written] == [f"http://a.weblm.test/{i}" for i in range(20)]
    assert {ident for _, ident in writer.written} == {closed[0][1]} and caller != closed[0][1]
    assert list(closed[0][0].urls) == [url for url, _ in notices]
    assert list(closed[0][0].record_ids) == [rid for _, rid in notices]


def test_fetches_queued_together_have_their_digests_looked_up_in_one_call(tmp_path):
    class CountingIndex(LocalDigestIndex):
        calls: list[int] = []

        def firsts(self, items):
            self.calls.append(len(items))
            return super().firsts(items)

    index = CountingIndex()
    writer = GatedWriter(tmp_path)
    writer.gate.clear()  # the first fetch waits in the writer's hands while the other nine queue up
    thread = WarcWriterThread(writer, 100, digests=lambda: index)
    assert all(thread.submit(fetch_of(i, b"the same page")) is None for i in range(10))
    writer.gate.set()
    thread.stop()
    assert thread.join(10)
    assert sum(index.calls) == 10 and len(index.calls) <= 2  # the first fetch alone (or not), then the rest at once
    [path] = writer.closed_files
    records = read_warc(path)
    [response] = [r["headers"] for r in records if r["type"] == "response"]
    revisits = [r["headers"] for r in records if r["type"] == "revisit"]
    assert [h.get_header("WARC-Target-URI") for h in revisits] == [f"http://a.weblm.test/{i}" for i in range(1, 10)]
    assert {h.get_header("WARC-Refers-To") for h in revisits} == {response.get_header("WARC-Record-ID")}


def test_a_full_queue_makes_the_caller_wait_and_drops_nothing(tmp_path):
    writer = GatedWriter(tmp_path)
    writer.gate.clear()  # a stalled disk
    thread = WarcWriterThread(writer, 2)
    answers = [thread.submit(fetch_of(i)) for i in range(6)]
    waiting = [a for a in answers if a is not None]
    # one or two in the writer's hands (it takes what is queued at once), two queued, the rest wait
    assert answers[0] is None and len(waiting) >= 2
    fired = []
    for i, d in enumerate(answers):
        if d is not None:
            d.addCallback(lambda _, i=i: fired.append(i))
    assert not fired and thread.full_waits == len(waiting)
    writer.gate.set()
    thread.stop()  # behind the waiting fetches
    assert thread.join(10)
    assert fired == sorted(fired) == [i for i, a in enumerate(answers) if a is not None]  # in arrival order
    assert [url for url, _ in writer.written] == [f"http://a.weblm.test/{i}" for i in range(6)]
    with pytest.raises(WriterStopped, match="not recorded"):
        thread.submit(fetch_of(7))


def test_flush_closes_the_file_after_what_was_queued_before_it(tmp_path):
    closed = []
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {}, on_closed=closed.append)
    thread = WarcWriterThread(writer, 10)
    thread.flush()  # nothing written yet: no file
    thread.submit(fetch_of(1))
    thread.submit(fetch_of(2))
    thread.flush()
    thread.flush()  # the file is already closed: nothing to do
    thread.submit(fetch_of(3))
    thread.stop()
    assert thread.join(10)
    assert [c.urls for c in closed] == [("http://a.weblm.test/1", "http://a.weblm.test/2"), ("http://a.weblm.test/3",)]


def test_an_idle_file_is_closed_by_a_tick_once_old(tmp_path):
    closed = []
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {}, on_closed=closed.append, max_file_age_s=0.2)
    thread = WarcWriterThread(writer, 10)
    thread.submit(fetch_of(1))
    thread.tick()
    time.sleep(0.05)
    assert not closed  # too young
    time.sleep(0.2)
    thread.tick()
    deadline = time.monotonic() + 5
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [c.urls for c in closed] == [("http://a.weblm.test/1",)]
    thread.stop()
    assert thread.join(10)


def test_a_failed_write_is_reported_and_the_thread_goes_on(tmp_path):
    class FullOnce(RotatingWarcWriter):
        failed = False

        def write(self, fetch, digests=None, capture=None):
            if fetch.url.endswith("/2") and not self.failed:
                self.failed = True
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(fetch, digests, capture)

    errors, closed = [], []
    thread = WarcWriterThread(FullOnce(tmp_path, "t", 10**9, {}, on_closed=closed.append), 10,
                              on_error=lambda f, exc: errors.append((f.url, exc.errno)))
    for i in range(1, 4):
        thread.submit(fetch_of(i))
    thread.stop()
    assert thread.join(10)
    assert errors == [("http://a.weblm.test/2", errno.ENOSPC)]
    assert closed[0].urls == ("http://a.weblm.test/1", "http://a.weblm.test/3")


def test_the_digest_index_is_asked_at_each_write(tmp_path):
    index: list = [None]  # the frontier may set its index after the writer started
    first_file = threading.Event()
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {}, on_closed=lambda c: first_file.set())
    thread = WarcWriterThread(writer, 10, digests=lambda: index[0])
    thread.submit(fetch_of(1, b"same"))
    thread.submit(fetch_of(2, b"same"))  # no index yet: in full
    thread.flush()
    assert first_file.wait(10)
    index[0] = LocalDigestIndex()
    thread.submit(fetch_of(3, b"same"))
    thread.submit(fetch_of(4, b"same"))
    thread.stop()
    assert thread.join(10)
    assert (thread.writer.counters.responses, thread.writer.counters.revisits) == (3, 1)


# --- in real crawls ------------------------------------------------------------------------------------------

class LocalDigestScheduler(Scheduler):
    """Stock Scrapy's scheduler plus the process-local digest index, where the frontier would put its own."""

    @classmethod
    def from_crawler(cls, crawler):
        crawler.weblm_digest_index = LocalDigestIndex()
        return super().from_crawler(crawler)


STOCK = "scrapy.core.scheduler.Scheduler"
SAME = b"<html><body>one page, two names</body></html>"
HOME = b"<html><body><a href='/a'>a</a> <a href='/b'>b</a> <a href='/slow'>slow</a></body></html>"


def site(slow_s: float = 0.0):
    def answer(path: str):
        ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
        if path == "/robots.txt":
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
        if path == "/":
            return ok % len(HOME), HOME
        if path in ("/a", "/b"):
            return ok % len(SAME), SAME
        if path == "/slow":
            time.sleep(slow_s)
            return ok % 4, b"slow"
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
    return answer


def records_by_type(files) -> dict[str, list]:
    out: dict[str, list] = {}
    for path in files:
        for rec in read_warc(path):
            out.setdefault(rec["type"], []).append(rec)
    return out


def test_a_crawl_writes_metadata_and_revisit_records(tmp_path, raw_server):
    server = raw_server(site())
    run = run_crawl(["http://dup.weblm.test/"], tmp_path,
                    ["proxy=" + server.proxy_url(), "concurrent_requests_per_host=1",
                     "scheduler=tests.spider.test_warc_writer_thread.LocalDigestScheduler"])
    assert run.returncode == 0, run.log[-3000:]
    recs = records_by_type(run.warc_files)
    (revisit,) = recs["revisit"]
    original = next(r for r in recs["response"]
                    if r["headers"].get_header("WARC-Record-ID") == revisit["headers"].get_header("WARC-Refers-To"))
    assert {original["headers"].get_header("WARC-Target-URI"), revisit["headers"].get_header("WARC-Target-URI")} == {
        "http://dup.weblm.test/a", "http://dup.weblm.test/b"}
    assert revisit["headers"].get_header("WARC-Payload-Digest") == original["headers"].get_header("WARC-Payload-Digest")
    assert all(r["digest_ok"] is not False for rs in recs.values() for r in rs)
    fields = {r["headers"].get_header("WARC-Target-URI"): dict(
        line.split(": ", 1) for line in r["raw"].decode().splitlines()) for r in recs["metadata"]}
    ids = {r["headers"].get_header("WARC-Record-ID") for r in recs["response"] + recs["revisit"]}
    assert {r["headers"].get_header("WARC-Concurrent-To") for r in recs["metadata"]} == ids
    page = fields["http://dup.weblm.test/a"]
    assert page["politenessKey"] == "dup.weblm.test" and page["depth"] == "1" and int(page["fetchTimeMs"]) >= 0
    assert page.get("via", "http://dup.weblm.test/") == "http://dup.weblm.test/"  # once the spider sets weblm_parent
    scrapy_stats = run.stats["scrapy"]
    assert scrapy_stats["weblm/warc/revisits"] == 1
    assert scrapy_stats["weblm/warc/responses"] == len(recs["response"])
    assert run.stats["warc_records"] == sum(len(rs) for rs in recs.values())


def test_an_idle_crawl_closes_an_old_file_before_it_ends(tmp_path, raw_server):
    server = raw_server(site(slow_s=3.0))
    # stock Scrapy's scheduler sends no warc_flush_requested: only the file's age can close it here
    cmd = crawl_command(["http://idle.weblm.test/"], tmp_path,
                        ["proxy=" + server.proxy_url(), "download_timeout_s=10", "warc.max_file_age_s=0.5",
                         f"scheduler={STOCK}"])
    with background_crawl(cmd, tmp_path) as (proc, log):
        wait_for_request(server, "/slow", log)
        time.sleep(1.5)  # the crawl waits for /slow; nothing is written meanwhile
        closed_while_idle = sorted(p.name for p in (tmp_path / "warc").glob("*.warc.gz"))
        returncode = proc.wait(timeout=60)
    run = finished(returncode, tmp_path, log.read_text())
    assert run.returncode == 0, run.log[-3000:]
    assert closed_while_idle, "the file holding the first fetches should be closed by its age while idle"
    urls = [r["headers"].get_header("WARC-Target-URI") for r in read_warc(tmp_path / "warc" / closed_while_idle[0])
            if r["type"] == "response"]
    assert "http://idle.weblm.test/slow" not in urls and urls


def test_a_write_error_stops_the_crawl_and_leaves_whole_files(tmp_path, raw_server):
    noise = os.urandom(40_000)  # incompressible: each page adds ~40 kB to the WARC file

    def chain(path: str):  # /, /1, /2, ...: each page links to the next
        if path == "/robots.txt":
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
        body = b"<html><a href='/%d'>next</a>" % (int(path[1:] or 0) + 1) + noise
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body), body

    server = raw_server(chain)

    def file_size_limit():  # a disk that fills up at 150 kB: write(2) fails with EFBIG, as with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))

    # the limit is the whole process's: stock Scrapy's scheduler, as the embedded frontier's database would hit it too
    cmd = crawl_command(["http://full.weblm.test/"], tmp_path,
                        ["proxy=" + server.proxy_url(), "depth_limit=50", "max_pages_per_host=100",
                         f"scheduler={STOCK}"])
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=90,
                          preexec_fn=file_size_limit)
    run = finished(proc.returncode, tmp_path, proc.stdout + proc.stderr)
    assert "stopping the crawl (free disk space" in run.log, run.log[-3000:]
    assert run.stats["finish_reason"] == "warc_write_error"
    assert run.stats["errors"]["warc_write"] >= 1
    (path,) = run.warc_files
    assert path.name.endswith(".warc.gz")  # closed and renamed: its whole fetches are durable
    recs = read_warc(path)
    assert all(r["digest_ok"] is not False for r in recs)
    assert [r["type"] for r in recs][-1] == "request"
    written = sum(1 for r in recs if r["type"] == "response")
    assert written == run.stats["pages_fetched"] >= 2


class SlowDiskScheduler(Scheduler):
    """Stock Scrapy's scheduler plus a digest index that takes 50 ms a lookup: a writer slower than the fetches."""

    @classmethod
    def from_crawler(cls, crawler):
        class SlowIndex(LocalDigestIndex):
            def firsts(self, items):
                time.sleep(0.05 * len(items))
                return super().firsts(items)

        crawler.weblm_digest_index = SlowIndex()
        return super().from_crawler(crawler)


def test_a_slow_writer_makes_the_crawl_wait_and_loses_nothing(tmp_path, raw_server):
    links = b"".join(b"<a href='/p%d'>p</a>" % i for i in range(20))

    def answer(path: str):
        if path == "/robots.txt":
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""
        body = b"<html><body>%s %s</body></html>" % (path.encode(), links if path == "/" else b"")
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body), body

    server = raw_server(answer)
    run = run_crawl(["http://slowdisk.weblm.test/"], tmp_path,
                    ["proxy=" + server.proxy_url(), "warc.queue_records=1",
                     "scheduler=tests.spider.test_warc_writer_thread.SlowDiskScheduler"])
    assert run.returncode == 0, run.log[-3000:]
    scrapy_stats = run.stats["scrapy"]
    assert scrapy_stats["weblm/warc/queue_full_waits"] > 0
    written = [r["headers"].get_header("WARC-Target-URI") for p in run.warc_files for r in read_warc(p)
               if r["type"] == "response"]
    assert len(written) == len(set(written)) == scrapy_stats["downloader/response_count"] == 22  # robots, /, 20
    assert run.stats["pages_fetched"] == 22 and scrapy_stats["weblm/warc/queued"] == 0
