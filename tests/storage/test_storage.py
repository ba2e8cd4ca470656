"""storage/: the same calls on a local folder, on a real S3 API server (moto) and on a real GCS JSON API server
(fake-gcs-server), both over HTTP."""
from __future__ import annotations

import threading
import time

import pytest

import storage
from storage.config import UploadSettings
from storage.upload import Uploader, recover
from tests.support.s3server import FlakyRelay, storage_overlay


@pytest.fixture(params=["local", "s3", "gs"])
def base(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue({"s3": "s3", "gs": "gcs"}[request.param]) + "/store"


def test_write_read_list_remove(base):
    storage.write_text(storage.join(base, "a", "one.json"), '{"n": 1}')
    storage.write_bytes(storage.join(base, "a", "b", "two.warc.gz"), b"\x1f\x8b two")
    storage.write_bytes(storage.join(base, "three.warc.gz"), b"three")
    assert storage.read_text(storage.join(base, "a", "one.json")) == '{"n": 1}'
    assert storage.exists(storage.join(base, "a", "b", "two.warc.gz"))
    assert storage.size(storage.join(base, "three.warc.gz")) == 5
    found = storage.glob(base, "*.warc.gz")
    assert found == sorted([storage.join(base, "a", "b", "two.warc.gz"), storage.join(base, "three.warc.gz")])
    storage.remove(storage.join(base, "a"), recursive=True)
    assert not storage.exists(storage.join(base, "a", "one.json"))
    assert storage.glob(base, "*.json") == []


def test_put_file_checks_the_size_that_arrived(base, tmp_path):
    local = tmp_path / "big.bin"
    local.write_bytes(bytes(range(256)) * 4096)
    storage.put_file(local, storage.join(base, "big.bin"))
    assert storage.read_bytes(storage.join(base, "big.bin")) == local.read_bytes()


def test_copy_tree_move_and_walk(base):
    staging = storage.join(base, "staging")
    storage.write_bytes(storage.join(staging, "a.bin"), b"a" * 10)
    storage.write_bytes(storage.join(staging, "sub", "b.bin"), b"b" * 20)
    copied = storage.copy_tree(staging, storage.join(base, "copy"))
    assert sorted(copied) == [storage.join(base, "copy", "a.bin"), storage.join(base, "copy", "sub", "b.bin")]
    assert list(storage.walk_files(storage.join(base, "copy"))) == sorted(copied)
    assert storage.read_bytes(storage.join(base, "copy", "sub", "b.bin")) == b"b" * 20
    storage.move(storage.join(staging, "a.bin"), storage.join(staging, "final.bin"))
    assert not storage.exists(storage.join(staging, "a.bin"))
    assert storage.read_bytes(storage.join(staging, "final.bin")) == b"a" * 10
    assert storage.listdir(staging) == sorted([storage.join(staging, "final.bin"), storage.join(staging, "sub")])


def test_spark_uri_spells_s3_as_s3a():
    assert storage.spark_uri("s3://bucket/lake/bronze/pages") == "s3a://bucket/lake/bronze/pages"
    assert storage.spark_uri("/data/lake") == "/data/lake"
    assert storage.spark_uri("gs://bucket/lake") == "gs://bucket/lake"


def test_uploader_survives_an_outage_and_loses_nothing(s3, s3_server, tmp_path, monkeypatch):
    """The endpoint refuses every connection for a while; each file arrives once it is back, and a local
    file is deleted only after its copy is durable."""
    relay = FlakyRelay(s3_server.port)
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(storage_overlay(tmp_path / "relay.yaml", relay.endpoint)))
    storage.reset()
    buffer = tmp_path / "buffer"
    buffer.mkdir()
    files = []
    for i in range(4):
        path = buffer / f"part-{i}.warc.gz"
        path.write_bytes(f"record {i}".encode() * 1000)
        files.append(path)
    durable = []
    uploader = Uploader(UploadSettings(retries=30, backoff_initial_s=0.05, backoff_max_s=0.3, workers=2),
                        on_durable=lambda local, dest: durable.append(dest))
    relay.refusing.set()
    for path in files:
        uploader.submit(path, storage.join(s3, "warc", path.name))
    time.sleep(4.0)  # longer than s3fs's and botocore's own retries, so the uploader's retries are exercised
    assert all(p.exists() for p in files), "a file left the buffer while the store was refusing"
    assert durable == []
    threading.Timer(0.0, relay.refusing.clear).start()
    assert uploader.close(timeout_s=60)
    assert relay.refused > 0 and uploader.counts["attempts_failed"] > 0
    assert sorted(durable) == sorted(storage.join(s3, "warc", p.name) for p in files)
    assert not any(p.exists() for p in files)
    for i in range(4):
        assert storage.read_bytes(storage.join(s3, "warc", f"part-{i}.warc.gz")) == f"record {i}".encode() * 1000
    relay.close()


def test_files_left_after_retries_stay_and_are_recovered(s3, s3_server, tmp_path, monkeypatch):
    relay = FlakyRelay(s3_server.port)
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(storage_overlay(tmp_path / "relay.yaml", relay.endpoint)))
    storage.reset()
    buffer = tmp_path / "buffer"
    buffer.mkdir()
    (buffer / "x.warc.gz").write_bytes(b"payload")
    (buffer / "y.warc.gz.open").write_bytes(b"still being written")
    relay.refusing.set()
    quick = UploadSettings(retries=2, backoff_initial_s=0.01, backoff_max_s=0.02, workers=1)
    first = Uploader(quick)
    first.submit(buffer / "x.warc.gz", storage.join(s3, "warc", "x.warc.gz"))
    assert not first.close(timeout_s=30)
    assert first.counts["files_left_in_buffer"] == 1 and (buffer / "x.warc.gz").exists()
    relay.refusing.clear()
    second = Uploader(quick)
    assert recover(second, buffer, storage.join(s3, "warc"), (".warc.gz",)) == 1  # not the .open file
    assert second.close(timeout_s=30)
    assert storage.read_bytes(storage.join(s3, "warc", "x.warc.gz")) == b"payload"
    assert (buffer / "y.warc.gz.open").exists()
    relay.close()
