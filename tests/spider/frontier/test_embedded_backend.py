"""The embedded SQLite backend against the frontier contract, and what one machine adds: processes sharing the
file, a crawl killed mid-write, one instance called from two threads."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from spider.frontier.backend import DigestSeen, HostState, RobotsRecord
from spider.frontier.bloom import BloomLayout
from spider.frontier.embedded import SqliteFrontier
from tests.spider.frontier.contract import SMALL, T0, FrontierContract, url, urls_of

REPO = Path(__file__).resolve().parents[3]


class TestSqliteFrontier(FrontierContract):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp_path = tmp_path

    def make_backend(self, bloom: BloomLayout = SMALL) -> SqliteFrontier:
        backend = SqliteFrontier(str(self.tmp_path / "frontier" / "frontier.sqlite"), bloom)
        backend.clear()
        return backend

    def reopen(self, backend: SqliteFrontier, bloom: BloomLayout | None = None) -> SqliteFrontier:
        return SqliteFrontier(backend.path, bloom or backend.bloom)


# A child process over the same file: `url()` as in the contract, `fb` the frontier, sys.argv[1] its path.
CHILD = """
import json, sys
from spider.frontier.embedded import SqliteFrontier
from tests.spider.frontier.contract import SMALL, T0, url
fb = SqliteFrontier(sys.argv[1], SMALL)
"""


def run_child(path: Path, code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD + textwrap.dedent(code), str(path)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)


def test_a_second_process_sharing_the_file_sees_the_same_admissions_and_leases(tmp_path):
    fb = SqliteFrontier(str(tmp_path / "frontier.sqlite"), SMALL)
    try:
        fb.add([url("http://a.test/1")], T0, 0)
        (mine,) = fb.lease(1, T0, 60)
        child = run_child(Path(fb.path), """
            print(json.dumps(fb.add([url("http://a.test/1"), url("http://a.test/2"), url("http://b.test/1")], T0, 0)))
            print(json.dumps([item.host for item in fb.lease(10, T0, 60)]))
        """)
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        assert out.splitlines() == ['["seen", "admitted", "admitted"]', '["b.test"]']  # a.test is busy with mine
        fb.ack([mine.id], None, T0)
        fb.release_host("a.test", T0)
        assert urls_of(fb.lease(10, T0, 60)) == ["http://a.test/2"]
    finally:
        fb.close()


def test_a_crawl_killed_mid_write_loses_no_commit_and_leaves_a_sound_file(tmp_path):
    path = tmp_path / "frontier.sqlite"
    child = run_child(path, """
        n = 0
        while True:  # admit, lease and settle as fast as it can; print what each committed add admitted
            batch = [url(f"http://h{n % 17}.test/{n}-{i}") for i in range(20)]
            fb.add(batch, T0 + n, 0)
            print(n, flush=True)
            for item in fb.lease(8, T0 + n, 30):
                fb.fetched([item.id], T0 + n + 60)
                fb.ack([item.id], T0 + n + 1000 if n % 2 else None, T0 + n)
                fb.release_host(item.host, T0 + n)
            n += 1
    """)
    committed = -1
    while committed < 50:
        committed = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    child.stdout.close()

    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        by_state = dict(db.execute("SELECT state, count(*) FROM urls GROUP BY state").fetchall())
        assert {state: n for state, n in db.execute("SELECT state, n FROM url_counts") if n} == by_state
    fb = SqliteFrontier(str(path), SMALL)
    try:
        assert set(fb.add([url(f"http://h{n % 17}.test/{n}-{i}") for n in range(committed + 1) for i in range(20)],
                          T0, 0)) == {"seen"}
        assert fb.counts(T0)["seen"] >= 20 * (committed + 1)
    finally:
        fb.close()


def test_one_instance_serves_the_scheduler_and_the_warc_writer_threads_at_once(tmp_path):
    fb = SqliteFrontier(str(tmp_path / "frontier.sqlite"), SMALL)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(300):
                first = DigestSeen(f"http://a.test/{i}", "2026-01-01T00:00:00Z", f"<urn:uuid:{i}>")
                assert fb.digest_firsts([(f"sha1:{i}", first)]) == [None]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    thread = threading.Thread(target=writer)
    thread.start()
    leased = 0
    for step in range(100):
        fb.add([url(f"http://h{step % 7}.test/{step}")], T0 + step, 0)
        for item in fb.lease(4, T0 + step, 30):
            fb.ack([item.id], None, T0 + step)
            fb.release_host(item.host, T0 + step)
            leased += 1
    thread.join()
    fb.close()
    assert not errors and leased == 100


def test_a_different_bloom_layout_is_refused_until_the_frontier_is_cleared(tmp_path):
    path = str(tmp_path / "frontier.sqlite")
    SqliteFrontier(path, SMALL).close()
    fb = SqliteFrontier(path, BloomLayout(capacity=5000, fp_rate=1e-6, block_bytes=4096))
    try:
        with pytest.raises(ValueError, match="Bloom layout"):
            fb.add([url("http://a.test/1")], T0, 0)
        fb.clear()
        assert fb.add([url("http://a.test/1")], T0, 0) == ["admitted"]
    finally:
        fb.close()


def test_a_batch_is_one_transaction_that_a_failure_undoes(tmp_path):
    from spider.frontier.embedded import SqliteFrontier
    from tests.spider.frontier.contract import SMALL, T0, url

    fb = SqliteFrontier(str(tmp_path / "f.db"), SMALL)
    with fb.batch():
        fb.add([url("http://a.test/1")], T0, 0)
        fb.lease(1, T0, 30)
    assert fb.counts(T0)["leased"] == 1
    try:
        with fb.batch():
            fb.add([url("http://a.test/2")], T0, 0)
            raise RuntimeError("the tick failed half way")
    except RuntimeError:
        pass
    assert fb.add([url("http://a.test/2")], T0, 0) == ["admitted"]  # the failed batch left no trace
    fb.close()


def _a_file_from_before(tmp_path, columns: list[tuple[str, str]]):
    """A frontier file with two URLs of a.test, the first leased at T0 for 60 s, as an earlier version wrote it:
    without these (table, column)s.  Reopened: they are back.  Returns its path, the lease and the reopened one."""
    path = tmp_path / "frontier.sqlite"
    fb = SqliteFrontier(str(path), SMALL)
    fb.add([url("http://a.test/1"), url("http://a.test/2")], T0, 0)
    (old,) = fb.lease(1, T0, 60)
    fb.close()
    with sqlite3.connect(path) as db:
        for table, column in columns:
            db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    fb = SqliteFrontier(str(path), SMALL)
    with sqlite3.connect(path) as db:
        for table, column in columns:
            assert column in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    return path, old, fb


def test_a_frontier_file_from_before_lease_owners_gets_them_and_its_leases_stay_anyones(tmp_path):
    path, old, fb = _a_file_from_before(tmp_path, [("urls", "owner"), ("hosts", "owner")])
    try:
        # the lease taken before owners has none: the restarted worker may still finish it
        fb.fetched([old.id], T0 + 100)
        assert fb.ack([old.id], None, T0 + 1) == 1
        assert fb.release_host("a.test", T0 + 1) is True
        (new,) = fb.lease(1, T0 + 1, 60)
        assert urls_of([new]) == ["http://a.test/2"]
        other = SqliteFrontier(str(path), SMALL)
        try:  # new leases have an owner
            assert other.ack([new.id], None, T0 + 2) == 0 and other.release_host("a.test", T0 + 2) is False
        finally:
            other.close()
    finally:
        fb.close()


def test_a_frontier_file_from_before_lease_numbers_gets_them(tmp_path):
    _, old, fb = _a_file_from_before(tmp_path, [("hosts", "leases")])
    try:
        # the restarted worker's lease of the host before the upgrade lapses; its next lease of it is the first counted
        (again,) = fb.lease(1, T0 + 61, 60)
        assert again.id == old.id and again.host_lease == 1
        assert fb.release_host("a.test", T0 + 62, HostState(2.0, 0, 0.0, 0), again.host_lease) is True
        assert fb.host_state("a.test").delay_s == 2.0 and fb.counts(T0 + 62)["busy_hosts"] == 0
        (new,) = fb.lease(1, T0 + 62, 60)
        assert new.host_lease == 2 and fb.release_host("a.test", T0 + 63, None, 1) is False
    finally:
        fb.close()


def test_a_frontier_file_from_before_tdmrep_files_reads_its_robots_records_as_not_asked(tmp_path):
    path = tmp_path / "frontier.sqlite"
    fb = SqliteFrontier(str(path), SMALL)
    fb.robots_put("a.test", RobotsRecord("allow_all", b"", T0, T0 + 86400, "HTTP 404"))
    fb.close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE robots DROP COLUMN tdm")
    fb = SqliteFrontier(str(path), SMALL)
    try:   # frontier.tdmrep: respect asks this host's robots.txt and file again
        assert fb.robots_get("a.test") == RobotsRecord("allow_all", b"", T0, T0 + 86400, "HTTP 404", None)
        fb.robots_put("a.test", RobotsRecord("allow_all", b"", T0, T0 + 86400, "HTTP 404", b"[]"))
        assert fb.robots_get("a.test").tdm == b"[]"
    finally:
        fb.close()
