"""jobs.ingest over WARC lists (Common Crawl's warc.paths.gz, or a list of one's own) whose files are on a web
server (Python's http.server over real HTTP, as data.commoncrawl.org serves them): relative lines joined to the
base, each file copied to the executor once and read there, recorded in bronze.warc_files under its URL; a listed
file that is not there fails alone, is counted and named, and is tried again by the next run; a busy server's 503
and a copy cut midway are retried and resumed."""
from __future__ import annotations

import dataclasses
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conf import ConfigError
from conftest import PAGES
from jobs.ingest import IngestJob, read_warc_lists
from tests.support.s3server import HttpServer


@pytest.fixture(scope="module")
def web(crawl, tmp_path_factory):
    server = HttpServer("warc-web", lambda port: [sys.executable, "-m", "http.server", str(port), "--bind",
                                                  "127.0.0.1", "--directory", str(crawl.warc_dir)],
                        "/", tmp_path_factory.mktemp("warc-web"))
    yield server
    server.stop()


def test_a_list_names_files_relative_to_its_base_and_skips_comments(tmp_path):
    listing = tmp_path / "mine.txt"
    listing.write_text("# my crawl\n\ncrawl-data/a.warc.gz\n  s3://other/b.warc.gz  \n/data/c.warc\n")
    assert read_warc_lists([str(listing)], "https://data.commoncrawl.org/") == [
        "https://data.commoncrawl.org/crawl-data/a.warc.gz", "s3://other/b.warc.gz", "/data/c.warc"]
    with pytest.raises(ConfigError, match="line 'crawl-data/a.warc.gz' is relative and ingest.warc_list_base is empty"):
        read_warc_lists([str(listing)], "")
    with pytest.raises(ConfigError, match="WARC list .*nowhere.paths does not exist"):
        read_warc_lists([str(tmp_path / "nowhere.paths")], "")


def test_a_gzipped_list_of_files_on_a_web_server_is_ingested_and_recorded(spark, crawl, web, tmp_path):
    listing = tmp_path / "warc.paths.gz"
    names = [crawl.good_file.name, crawl.cut_file.name, "gone.warc.gz"]
    listing.write_bytes(gzip.compress(("# CC-MAIN-TEST\n" + "\n".join(names) + "\n").encode()))
    lake = tmp_path / "lake"
    args = ["--lake", str(lake), "--list", str(listing), "-o", f"ingest.warc_list_base={web.endpoint}/"]
    metrics = IngestJob().run(args)
    good, cut, gone = (f"{web.endpoint}/{name}" for name in names)
    files = {r["file"]: r for r in DeltaTable(str(lake / "bronze" / "warc_files")).to_pyarrow_table().to_pylist()}
    assert set(files) == {good, cut, gone}   # paths.warc_dir is not read when a list names the files
    assert files[good]["status"] == "ok" and files[good]["rows"] == len(PAGES)
    assert files[good]["size"] == crawl.good_file.stat().st_size and files[good]["modified"] is not None
    assert files[cut]["status"] == "partial" and files[cut]["rows"] == 2 and "truncated_record" in files[cut]["error"]
    assert files[gone]["status"] == "failed" and files[gone]["size"] == -1
    assert "cannot open: FileNotFoundError" in files[gone]["error"]
    assert metrics.extra["files_by_status"] == {"ok": 1, "partial": 1, "failed": 1}
    pages = DeltaTable(str(lake / "bronze" / "pages")).to_pyarrow_table().to_pylist()
    assert sorted(p["warc_record_id"] for p in pages) == sorted(crawl.good_ids + crawl.cut_ids_kept)
    assert {p["warc_file"] for p in pages} == {good, cut}
    # each file was downloaded once (the executor reads its copy four times), looked up twice: its size by the driver,
    # its version by the executor (which a copy left by a killed run must match to be taken up)
    requests = web.log_path.read_text()
    assert requests.count(f'"GET /{crawl.good_file.name} ') == 1
    assert requests.count(f'"HEAD /{crawl.good_file.name} ') == 2
    # the next run reads again only what did not finish ok: the cut file and the missing one
    again = IngestJob().run(args)
    assert again.extra["files_to_read"] == 2 and again.extra["files_already_ingested"] == 1
    assert again.output_rows == 0


def test_a_remote_file_is_copied_into_sparks_scratch_folder_if_asked_and_removed_after(crawl, web, tmp_path,
                                                                                       monkeypatch):
    from jobs.config import load_jobs_config
    from jobs.ingest import fetched

    cfg = dataclasses.replace(load_jobs_config().ingest, copy_dir="spark")
    scratch = tmp_path / "spark-local"
    scratch.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(scratch))   # what Spark gives its Python workers
    url = f"{web.endpoint}/{crawl.good_file.name}"
    with fetched(url, crawl.good_file.stat().st_size, cfg) as local:
        assert local.startswith(str(scratch)) and local.endswith(crawl.good_file.name)   # its suffix picks the reader
        with open(local, "rb") as copy:
            assert copy.read() == crawl.good_file.read_bytes()
    assert [p.name for p in scratch.iterdir()] == ["weblm-ingest"] and list((scratch / "weblm-ingest").iterdir()) == []
    with fetched(url, 10 ** 18, cfg) as local:   # no room for a copy: read where it is
        assert local == url
    with fetched(str(crawl.good_file), 1, cfg) as local:   # a local file is read in place
        assert local == str(crawl.good_file)


def test_a_copy_killed_midway_is_taken_up_by_the_next_run_on_the_machine(tmp_path, monkeypatch):
    """An executor killed (SIGKILL) while copying a 1 GB file leaves part of it in Spark's scratch folder: the next
    run that reads the file there goes on from those bytes, and removes the folder once read."""
    import hashlib

    from jobs.config import load_jobs_config
    from jobs.ingest import fetched

    site = tmp_path / "site"
    site.mkdir()
    data = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(62_500))   # 2 MB
    (site / "CC-MAIN-0001.warc.gz").write_bytes(data)
    server = HttpServer("flaky-web", lambda port: [sys.executable, "tests/support/flaky_web.py", str(port), str(site),
                                                   "--stall", "1"], "/", tmp_path)
    scratch = tmp_path / "tmp"   # the worker's temp dir: ingest.copy_dir's default, kept across runs
    scratch.mkdir()
    url = f"{server.endpoint}/CC-MAIN-0001.warc.gz"
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    try:
        first = subprocess.Popen(
            [sys.executable, "-c", "import sys; from jobs.config import load_jobs_config; from jobs.ingest import "
             "fetched\nwith fetched(sys.argv[1], int(sys.argv[2]), load_jobs_config().ingest): pass", url,
             str(len(data))], env=dict(os.environ, PYTHONPATH=os.getcwd(), TMPDIR=str(scratch)))
        deadline = time.monotonic() + 60
        while not [p for p in scratch.glob("weblm-ingest/*/.*.part") if p.stat().st_size >= len(data) // 4]:
            assert first.poll() is None and time.monotonic() < deadline, "the first copy never got a quarter"
            time.sleep(0.05)
        first.kill()   # SIGKILL: no clean-up runs
        first.wait()
        [part] = scratch.glob("weblm-ingest/*/.*.part")
        have = part.stat().st_size
        with fetched(url, len(data), load_jobs_config().ingest) as local:
            assert Path(local).read_bytes() == data
        gets = [line.split(" ", 2)[2] for line in server.log_path.read_text().splitlines() if line.startswith("GET")]
        assert gets == [f"- -> 200 stalled after {len(data) // 2} of {len(data)} bytes",
                        f"bytes={have}-{len(data) - 1} -> 206 {len(data) - have} bytes"]
        assert list((scratch / "weblm-ingest").iterdir()) == []
    finally:
        server.stop()


def test_a_copy_that_fails_past_its_retries_keeps_its_bytes_for_the_next_run(tmp_path, monkeypatch):
    """A server that cuts every answer this run: the copy gives up after its retries and the file is read over the
    network, but the bytes copied so far stay in the file's folder, and the next run asks only for the rest."""
    import storage
    from jobs.config import load_jobs_config
    from jobs.ingest import fetched
    from tests.support.s3server import write_overlay

    site = tmp_path / "site"
    site.mkdir()
    data = os.urandom(400_000)
    (site / "CC-MAIN-0002.warc.gz").write_bytes(data)
    server = HttpServer("flaky-web", lambda port: [sys.executable, "tests/support/flaky_web.py", str(port), str(site),
                                                   "--cut", "2"], "/", tmp_path)
    quick = {"storage": {"download": {"retries": 2, "backoff_initial_s": 0.05, "backoff_max_s": 0.1}}}
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(write_overlay(tmp_path / "quick.yaml", quick)))
    storage.reset()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    url = f"{server.endpoint}/CC-MAIN-0002.warc.gz"
    try:
        with fetched(url, len(data), load_jobs_config().ingest) as where:
            assert where == url   # read over the network this time
        [part] = scratch.glob("weblm-ingest/*/.*.part")
        have = part.stat().st_size
        assert 0 < have < len(data)
        with fetched(url, len(data), load_jobs_config().ingest) as local:
            assert Path(local).read_bytes() == data
        gets = [line.split(" ", 2)[2] for line in server.log_path.read_text().splitlines() if line.startswith("GET")]
        assert gets[-1] == f"bytes={have}-{len(data) - 1} -> 206 {len(data) - have} bytes", gets
        assert list((scratch / "weblm-ingest").iterdir()) == []   # read whole: removed
    finally:
        server.stop()
        storage.reset()


def test_a_file_another_task_is_copying_here_is_copied_apart_and_stale_copies_are_removed(crawl, web, tmp_path,
                                                                                         monkeypatch):
    from jobs import ingest
    from jobs.config import load_jobs_config

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    url = f"{web.endpoint}/{crawl.good_file.name}"
    stale = scratch / "weblm-ingest" / "0123abcd"
    stale.mkdir(parents=True)
    (stale / ".x.warc.gz.part").write_bytes(b"half")
    os.utime(stale, (time.time() - ingest.STALE_COPY_S - 60,) * 2)
    with ingest.fetched(url, crawl.good_file.stat().st_size, load_jobs_config().ingest) as mine:
        assert not stale.exists()   # nobody held it, and nothing touched it for three days
        held = Path(mine).parent
        assert held.parent == scratch / "weblm-ingest"
        # a speculative copy of the same task, at the same time: its own folder, not this one's lock or bytes
        with ingest.fetched(url, crawl.good_file.stat().st_size, load_jobs_config().ingest) as theirs:
            assert Path(theirs).parent.parent == scratch and Path(theirs).parent.name.startswith("weblm-ingest-")
            assert Path(theirs).read_bytes() == Path(mine).read_bytes() == crawl.good_file.read_bytes()
        assert Path(mine).exists()
    assert sorted(p.name for p in scratch.iterdir()) == ["weblm-ingest"] and not held.exists()


def test_a_listed_file_on_a_busy_server_that_cuts_its_answer_is_ingested_whole(spark, crawl, tmp_path):
    """data.commoncrawl.org answers 503 Slow Down when busy and a 1 GB copy can be cut midway: the executor's copy
    retries with backoff and goes on from the byte it had (storage.download), so the file is read once, whole."""
    server = HttpServer("flaky-web", lambda port: [sys.executable, "tests/support/flaky_web.py", str(port),
                                                   str(crawl.warc_dir), "--busy", "1", "--cut", "1"],
                        "/", tmp_path)
    try:
        listing = tmp_path / "warc.paths"
        listing.write_text(crawl.good_file.name + "\n")
        lake = tmp_path / "lake"
        metrics = IngestJob().run(["--lake", str(lake), "--list", str(listing),
                                   "-o", f"ingest.warc_list_base={server.endpoint}/"])
        files = DeltaTable(str(lake / "bronze" / "warc_files")).to_pyarrow_table().to_pylist()
        assert [(f["status"], f["rows"]) for f in files] == [("ok", len(PAGES))]
        assert metrics.extra["files_by_status"] == {"ok": 1, "partial": 0, "failed": 0}
        pages = DeltaTable(str(lake / "bronze" / "pages")).to_pyarrow_table().to_pylist()
        assert sorted(p["warc_record_id"] for p in pages) == sorted(crawl.good_ids)
        size = crawl.good_file.stat().st_size
        gets = [line.split(" -> ")[1] for line in server.log_path.read_text().splitlines() if line.startswith("GET")]
        assert gets == ["503", f"200 cut after {size // 2} of {size} bytes", f"206 {size - size // 2} bytes"]
    finally:
        server.stop()


def test_a_file_already_ingested_is_not_read_again_when_its_lookup_fails(spark, crawl, tmp_path, monkeypatch):
    """The driver looks each listed file up (HEAD) to tell a new or grown file from one already read: a 503 there is
    retried, and a file held as ok whose lookup keeps failing is not downloaded and read again."""
    from tests.support.s3server import free_port, write_overlay

    quick = {"storage": {"download": {"retries": 3, "backoff_initial_s": 0.05, "backoff_max_s": 0.1}}}
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(write_overlay(tmp_path / "quick.yaml", quick)))
    listing = tmp_path / "warc.paths"
    listing.write_text(crawl.good_file.name + "\n")
    lake = tmp_path / "lake"

    port = free_port()

    def ingest(*flags: str):   # each run a server on the same port: the files keep their URLs
        server = HttpServer("flaky-web", lambda port: [sys.executable, "tests/support/flaky_web.py", str(port),
                                                       str(crawl.warc_dir), *flags], "/", tmp_path, port)
        try:
            metrics = IngestJob().run(["--lake", str(lake), "--list", str(listing),
                                       "-o", f"ingest.warc_list_base={server.endpoint}/"])
            return metrics, server.log_path.read_text().splitlines()
        finally:
            server.stop()

    first, _ = ingest()
    assert first.extra["files_by_status"]["ok"] == 1
    def answers(requests: list[str], method: str) -> list[str]:
        return [line.split(" -> ")[1] for line in requests if line.startswith(method)]

    # fsspec looks a file up with a HEAD, then a GET of its headers: both busy twice, the third try finds the same
    # size, and the file is not read again
    busy, requests = ingest("--head-busy", "2", "--busy", "2")
    assert busy.extra["files_to_read"] == 0 and busy.extra["files_already_ingested"] == 1
    assert answers(requests, "HEAD") == ["503", "503", "200"] and answers(requests, "GET") == ["503", "503"]
    # never looked up (download.retries: 3): held as ok, still not read again
    down, requests = ingest("--head-busy", "100", "--busy", "100")
    assert down.extra["files_to_read"] == 0 and down.extra["files_already_ingested"] == 1
    assert answers(requests, "HEAD") == ["503"] * 3 and answers(requests, "GET") == ["503"] * 3
