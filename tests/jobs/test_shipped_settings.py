"""A job's Python workers on Spark's executors reach object stores with the driver's storage settings, not the
defaults of the conf/ installed on their node: a cluster's executors have neither the driver's overlay files
($WEBLM_CONF_OVERLAY) nor its command line (`-o storage.…`).  Here the overlay is set in the driver after its
Spark started, so the executors' environment lacks it as a cluster node's would (the pipeline ran that way on a
standalone master and worker whose environment held no weblm setting, by hand; see the stop's note)."""
from __future__ import annotations

import os

import pytest

from conf import INLINE_ENV, split_paths_overrides
from conf.paths import load_paths
from jobs.base import build_session
from jobs.config import load_jobs_config


def executor_settings(spark) -> set[tuple]:
    """(region, endpoint, overlay variable) as each of 2 Python tasks on the executors sees them."""
    def probe(_):
        import os
        import storage
        s3 = storage._config().s3
        return s3.region, s3.endpoint_url, os.environ.get("WEBLM_CONF_OVERLAY", "")

    return set(spark.sparkContext.parallelize(range(2), 2).map(probe).collect())


@pytest.fixture
def environment(spark):
    """The shared session's worker environment, as it was before the test (later tests share the session)."""
    before = dict(spark.sparkContext.environment)
    yield spark.sparkContext.environment
    spark.sparkContext.environment.clear()
    spark.sparkContext.environment.update(before)


def test_executors_see_the_storage_settings_of_the_driver(spark, environment, tmp_path, monkeypatch):
    overlay = tmp_path / "driver-only.yaml"
    overlay.write_text("storage:\n  s3:\n    region: eu-weblm-7\n    endpoint_url: http://minio.internal:9000\n")
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", ",".join(filter(None, [os.environ.get("WEBLM_CONF_OVERLAY"),
                                                                     str(overlay)])))
    # before the job's session is built, the executors read their node's conf/ only: the default region
    ((region, _, seen_overlay),) = executor_settings(spark)
    assert str(overlay) not in seen_overlay and region != "eu-weblm-7"
    session, created = build_session(load_jobs_config(), load_paths(), None, "weblm-tests-jobs")
    assert session is spark and not created
    assert executor_settings(spark) == {("eu-weblm-7", "http://minio.internal:9000", seen_overlay)}

    # a command line's `-o storage.…` reaches them the same way, on top of the overlay
    monkeypatch.setenv(INLINE_ENV, "")   # restored after the test: it is what the overrides below set
    split_paths_overrides(["storage.s3.region=ap-weblm-3"])
    build_session(load_jobs_config(), load_paths(), None, "weblm-tests-jobs")
    assert executor_settings(spark) == {("ap-weblm-3", "http://minio.internal:9000", seen_overlay)}
    assert "ap-weblm-3" in environment[INLINE_ENV]
