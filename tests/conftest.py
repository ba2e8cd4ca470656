"""Fixtures every part's tests share: a real S3 API server (moto's server mode) and a real GCS JSON API server
(fake-gcs-server) on 127.0.0.1."""
from __future__ import annotations

import itertools
import os

import pytest

import storage
from tests.support.gcsserver import GcsServer, gcs_overlay
from tests.support.s3server import CREDENTIALS, S3Server, make_bucket, storage_overlay

_buckets = itertools.count()
# Test credentials for the local S3 server, in the environment from the start: JVMs (Spark's s3a) and
# child processes read credentials from the environment they were launched with.  They also keep any
# real credentials of the person running the tests out of reach.
os.environ.update(CREDENTIALS)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, tmp_path, monkeypatch):
    """A fresh bucket on the S3 server, with conf/storage.yaml pointed at it for this test.

    Yields the bucket's URI (`s3://weblm-test-N`).  Child processes inherit the overlay and credentials.
    """
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    _add_overlay(monkeypatch, storage_overlay(tmp_path / "s3-overlay.yaml", s3_server.endpoint))
    yield make_bucket(s3_server.endpoint, f"weblm-test-{os.getpid()}-{next(_buckets)}")
    storage.reset()


def _add_overlay(monkeypatch, overlay) -> None:
    """Apply one more conf overlay file for this test (child processes inherit it) and forget cached clients."""
    existing = os.environ.get("WEBLM_CONF_OVERLAY", "")
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", ",".join(filter(None, [existing, str(overlay)])))
    storage.reset()


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    server = GcsServer(tmp_path_factory.mktemp("gcs"))
    yield server
    server.stop()


@pytest.fixture
def gcs(gcs_server, tmp_path, monkeypatch):
    """A fresh bucket on the GCS server, with conf/storage.yaml's gcs section pointed at it for this test.

    Yields the bucket's URI (`gs://weblm-test-N`).  Child processes inherit the overlay.
    """
    _add_overlay(monkeypatch, gcs_overlay(tmp_path / "gcs-overlay.yaml", gcs_server.endpoint))
    yield gcs_server.make_bucket(f"weblm-test-{os.getpid()}-{next(_buckets)}")
    storage.reset()


@pytest.fixture(params=["s3", "gs"])
def bucket(request):
    """A fresh bucket on one object store's server, the test run once per store: `s3://...`, then `gs://...`."""
    return request.getfixturevalue({"s3": "s3", "gs": "gcs"}[request.param])


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    """`make test` runs two pytest-xdist workers (`--dist loadgroup`): each test file goes whole to one worker, so its
    module fixtures run once, and the jobs files that share a session's pipeline runs go to the same worker."""
    jobs = config.rootpath / "tests" / "jobs"
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        group = item.path.relative_to(config.rootpath).as_posix()
        if item.path.is_relative_to(jobs):
            if "pipeline_runs" in fixtures:
                group = "jobs: pipeline_runs"
            elif "pipeline" in fixtures:
                group = "jobs: pipeline"
        item.add_marker(pytest.mark.xdist_group(group))
