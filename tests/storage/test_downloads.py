"""storage.get_file and storage.read_bytes against servers that misbehave as busy ones do, over real HTTP: 503 Slow
Down (data.commoncrawl.org under load), a connection dropped midway through a body, a server that ignores byte ranges,
an S3 endpoint that resets connections for a while.  Transient failures are retried with backoff; a cut copy goes on
from the bytes it has; a missing file fails at once; nothing half-copied is left behind."""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import sys
import threading
import time

import aiohttp
import pytest

import storage
from tests.support.s3server import FlakyRelay, HttpServer, storage_overlay, write_overlay

QUICK = {"storage": {"download": {"retries": 4, "backoff_initial_s": 0.05, "backoff_max_s": 0.2}}}


@pytest.fixture
def payload(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    data = hashlib.sha256(b"seed").digest() * 40_000   # 1.28 MB: several of fsspec's 5 MiB chunks are not needed
    (folder / "CC-MAIN-0001.warc.gz").write_bytes(data)
    return folder, data


@pytest.fixture
def quick(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(write_overlay(tmp_path / "quick.yaml", QUICK)))
    storage.reset()
    yield
    storage.reset()


def serve(folder, tmp_path, *flags):
    return HttpServer("flaky-web", lambda port: [sys.executable, "tests/support/flaky_web.py", str(port), str(folder),
                                                 *flags], "/", tmp_path)


def requests(server) -> list[str]:
    return [line for line in server.log_path.read_text().splitlines() if line.startswith(("GET", "HEAD"))]


@pytest.mark.parametrize("flags, expected", [
    (["--busy", "2"], ["GET - -> 503", "GET - -> 503", "GET - -> 200 1280000 bytes"]),
    # cut twice: the second and third tries ask only for what is missing
    (["--cut", "2"], ["GET - -> 200 cut after 640000 of 1280000 bytes", "HEAD - -> 200",
                      "GET bytes=640000-1279999 -> 206 cut after 320000 of 640000 bytes", "HEAD - -> 200",
                      "GET bytes=640000-1279999 -> 206 640000 bytes"]),
    # a server that does not serve ranges (fsspec finds out from the HEAD, or from a ranged GET answered whole):
    # the copy starts again; the lines of that finding-out are left out here
    (["--cut", "1", "--no-ranges"], ["GET - -> 200 cut after 640000 of 1280000 bytes", "GET - -> 200 1280000 bytes"]),
])
def test_a_busy_or_cut_download_is_retried_and_arrives_whole(payload, tmp_path, quick, caplog, flags, expected):
    folder, data = payload
    server = serve(folder, tmp_path, *flags)
    try:
        target = tmp_path / "copy" / "CC-MAIN-0001.warc.gz"
        with caplog.at_level(logging.WARNING, logger="weblm.storage"):
            storage.get_file(f"{server.endpoint}/CC-MAIN-0001.warc.gz", target)
        assert target.read_bytes() == data
        assert sorted(p.name for p in target.parent.iterdir()) == ["CC-MAIN-0001.warc.gz"]   # no .part left
        seen = [line.replace(" /CC-MAIN-0001.warc.gz", "") for line in requests(server)]
        if "--no-ranges" in flags:
            assert not any("206" in line for line in seen)
            seen = [line for line in seen if line.startswith("GET - ")]
        assert seen == expected
        retried = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
        assert len(retried) == sum(line.startswith("GET") for line in expected) - 1
        assert all(f"copy of {server.endpoint}/CC-MAIN-0001.warc.gz: attempt" in m for m in retried)
    finally:
        server.stop()


def test_a_missing_file_fails_at_once_and_a_server_busy_past_every_retry_fails_cleanly(payload, tmp_path, quick):
    folder, data = payload
    server = serve(folder, tmp_path, "--busy", "10")
    try:
        with pytest.raises(FileNotFoundError):
            storage.get_file(f"{server.endpoint}/gone.warc.gz", tmp_path / "gone.warc.gz")
        with pytest.raises(aiohttp.ClientResponseError, match="503"):
            storage.get_file(f"{server.endpoint}/CC-MAIN-0001.warc.gz", tmp_path / "busy.warc.gz")
        assert sorted(p.name for p in tmp_path.iterdir() if "warc" in p.name) == []   # nothing half-copied
        seen = requests(server)
        assert sum(" /gone.warc.gz " in line for line in seen) == 1                  # a 404 is not asked again
        assert sum(line.startswith("GET /CC-MAIN-0001.warc.gz") for line in seen) == 4   # download.retries
    finally:
        server.stop()


@pytest.fixture
def one_try(tmp_path, monkeypatch):
    """No retries: a cut copy fails, as one killed midway stops."""
    once = {"storage": {"download": {"retries": 1, "backoff_initial_s": 0.05, "backoff_max_s": 0.1}}}
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(write_overlay(tmp_path / "once.yaml", once)))
    storage.reset()
    yield
    storage.reset()


@pytest.mark.parametrize("changed", [False, True], ids=["same-source", "source-changed"])
def test_a_copy_an_earlier_run_left_is_taken_up_while_its_source_is_unchanged(payload, tmp_path, one_try, caplog,
                                                                               changed):
    folder, data = payload
    server = serve(folder, tmp_path, "--cut", "1")
    url = f"{server.endpoint}/CC-MAIN-0001.warc.gz"
    target = tmp_path / "copy" / "CC-MAIN-0001.warc.gz"
    try:
        with pytest.raises(aiohttp.ClientPayloadError):
            storage.get_file(url, target, resume=True)
        assert (target.parent / ".CC-MAIN-0001.warc.gz.part").stat().st_size == len(data) // 2   # kept for the next
        if changed:   # the same size, other bytes, a later modification time: another ETag and Last-Modified
            data = hashlib.sha256(b"other").digest() * 40_000
            (folder / "CC-MAIN-0001.warc.gz").write_bytes(data)
            os.utime(folder / "CC-MAIN-0001.warc.gz", (time.time() + 10, time.time() + 10))
        with caplog.at_level(logging.WARNING, logger="weblm.storage"):
            storage.get_file(url, target, resume=True)
            storage.get_file(url, target, resume=True)   # the whole copy is kept: no download
        assert target.read_bytes() == data
        gets = [line.split(" -> ")[0].split(" ", 2)[2] + " -> " + line.split(" -> ")[1]
                for line in requests(server) if line.startswith("GET")]
        half = len(data) // 2
        second = f"- -> 200 {len(data)} bytes" if changed else f"bytes={half}-{len(data) - 1} -> 206 {half} bytes"
        assert gets == [f"- -> 200 cut after {half} of {len(data)} bytes", second]
        said = " | ".join(r.getMessage() for r in caplog.records)
        assert ("changed since an earlier run" in said) is changed
        assert (f"taking up the copy of {url} an earlier run left at byte {half}" in said) is not changed
        assert f"keeping the whole copy of {url}" in said
        assert not (target.parent / ".CC-MAIN-0001.warc.gz.part").exists()
    finally:
        server.stop()


def test_a_warc_list_on_a_busy_server_is_read_after_retries(payload, tmp_path, quick):
    folder, _ = payload
    (folder / "warc.paths").write_text("crawl-data/CC-MAIN-0001.warc.gz\n")
    server = serve(folder, tmp_path, "--busy", "1")
    try:
        assert storage.read_bytes(f"{server.endpoint}/warc.paths") == b"crawl-data/CC-MAIN-0001.warc.gz\n"
        assert [line for line in requests(server) if "warc.paths" in line] == [
            "GET /warc.paths - -> 503", "GET /warc.paths - -> 200 32 bytes"]
    finally:
        server.stop()


def test_an_s3_download_survives_an_endpoint_that_resets_connections_for_a_while(s3_server, s3, tmp_path,
                                                                                  monkeypatch, caplog):
    data = bytes(range(256)) * 4096
    storage.write_bytes(f"{s3}/dl/part-0.bin", data)
    relay = FlakyRelay(s3_server.port)
    overlay = storage_overlay(tmp_path / "relay.yaml", relay.endpoint, {
        "storage": {"download": {"retries": 10, "backoff_initial_s": 0.5, "backoff_max_s": 1.0}}})
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(overlay))
    storage.reset()
    try:
        relay.refusing.set()
        threading.Timer(4.0, relay.refusing.clear).start()   # down for 4 s: longer than botocore's and s3fs's retries
        with caplog.at_level(logging.WARNING, logger="weblm.storage"):
            storage.get_file(f"{s3}/dl/part-0.bin", tmp_path / "part-0.bin")
        assert (tmp_path / "part-0.bin").read_bytes() == data
        assert relay.refused >= 2
        assert any("attempt 1 of 10 failed" in r.getMessage() for r in caplog.records)   # ours, after botocore's
    finally:
        relay.close()
        storage.reset()


def _wrapped(cause: BaseException) -> FileNotFoundError:
    """What fsspec's HTTP `info` raises when its GET fails: FileNotFoundError from the GET's error."""
    try:
        raise FileNotFoundError("http://x/y") from cause
    except FileNotFoundError as exc:
        return exc


@pytest.mark.parametrize("exc, again", [
    (_wrapped(aiohttp.ClientResponseError(None, (), status=503)), True),
    (_wrapped(FileNotFoundError("http://x/y")), False),
    (aiohttp.ClientResponseError(None, (), status=503), True),
    (aiohttp.ClientResponseError(None, (), status=429), True),
    (aiohttp.ClientResponseError(None, (), status=403), False),
    (FileNotFoundError("gone"), False),
    (PermissionError("denied"), False),
    (ConnectionResetError(errno.ECONNRESET, "reset"), True),
    (TimeoutError(), True),
    (aiohttp.ClientPayloadError("cut"), True),
    (OSError("upload of x left 3 bytes, expected 4"), True),
    (ValueError("bad argument"), False),
])
def test_which_failures_are_worth_another_try(exc, again):
    assert storage.transient(exc) is again
