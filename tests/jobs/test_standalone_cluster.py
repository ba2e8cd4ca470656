"""The pipeline on a Spark standalone cluster: a master and a worker in their own JVMs, started with Spark's own
`spark-class` in the environment of a cluster node (nothing from the driver's environment), and an executor
JVM in the worker's folder, running two tasks at a time.  The WARC files are in a bucket (moto's S3 server), and
the driver is told its endpoint on the command line only (`-o storage.…`), as a deployment that points at an
S3-compatible store would: the executors that read those files must get it from the driver.

Everything that crosses a process or machine boundary is exercised for real: closures and Arrow batches
serialized to executors, executor-side imports of the jobs' modules and of their config, the settings the driver
hands them, the jars shipped through `spark.jars`, executors in a working folder of their own, and shards
written by executors.  The result must equal what the in-process run over the same files on local disk wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conftest import pipeline_options
from tests.support.s3server import CREDENTIALS, make_bucket
from tests.support.sparkcluster import StandaloneCluster, node_environment

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path):
    folder = tmp_path / "node"
    folder.mkdir()
    started = StandaloneCluster(folder, node_environment(folder, str(ROOT), CREDENTIALS))
    yield started
    started.stop()


def upload(s3_server, warc_dir: Path) -> str:
    """The crawl's WARC files (a damaged one among them) in a new bucket; returns their folder's URI."""
    import boto3

    bucket = make_bucket(s3_server.endpoint, f"weblm-standalone-{os.getpid()}")
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
                          aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    for path in sorted(warc_dir.iterdir()):
        client.upload_file(str(path), bucket.removeprefix("s3://"), f"warc/{path.name}")
    return f"{bucket}/warc"


def run_on_cluster(master: str, var: Path, warc_uri: str, endpoint: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "jobs.pipeline", "--master", master, *pipeline_options(var, warc_uri),
            "-o", f"storage.s3.endpoint_url={endpoint}", "-o", "storage.s3.path_style=true"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBLM_")}   # no overlay: the command line only
    env.update(CREDENTIALS, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def tables(var: Path) -> dict:
    out = {}
    for name in ("bronze/pages", "silver/documents", "silver/signals", "silver/quality", "gold/tokens"):
        table = DeltaTable(str(var / "lake" / name)).to_pyarrow_table()
        key = table.column("doc_id").to_pylist()
        column = {"bronze/pages": "url", "silver/documents": "content_sha256", "silver/signals": "language_score",
                  "silver/quality": "content_sha256", "gold/tokens": "tokens"}[name]
        out[name] = dict(zip(key, table.column(column).to_pylist()))
    return out


def outputs(var: Path) -> tuple:
    manifest = json.loads((var / "shards" / "manifest.json").read_text())
    shard_bytes = {s["prefix"]: (var / "shards" / f"{s['prefix']}.bin").read_bytes() for s in manifest["shards"]}
    return tables(var), manifest["totals"], shard_bytes


def test_standalone_cluster_run_equals_the_local_run(tmp_path, crawl, pipeline_runs, s3_server, cluster):
    """The same crawl (a damaged file included) and settings as the in-process `jobs.pipeline` runs of
    test_pipeline.py, whose final lake (failed, resumed, export again: equal to an uninterrupted run) is the
    reference; the cluster run extracts in the sandbox (the default), the reference without it."""
    var = tmp_path / "run"
    warc_uri = upload(s3_server, crawl.warc_dir)
    proc = run_on_cluster(cluster.master, var, warc_uri, s3_server.endpoint)
    assert proc.returncode == 0, f"{cluster.master}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    state = json.loads((var / "lake" / "_pipeline" / "state.json").read_text())
    assert [s["status"] for s in state["stages"].values()] == ["ok"] * 7   # maintain included
    # the same WARC files as the local run read (not the crawl's unfinished .open file), read from the bucket
    files = DeltaTable(str(var / "lake" / "bronze" / "warc_files")).to_pyarrow_table().to_pylist()
    local_files = DeltaTable(str(pipeline_runs.lake / "bronze" / "warc_files")).to_pyarrow_table().to_pylist()
    assert sorted(row["file"] for row in files) == sorted(f"{warc_uri}/{Path(row['file']).name}" for row in local_files)
    assert sum(row["rows"] for row in files) > 0, files
    # the executors ran in the worker's folder, apart from the driver's
    assert list((cluster.folder / "work").glob("app-*/0/stderr"))
    cluster_out, local = outputs(var), outputs(pipeline_runs.lake.parent)
    assert cluster_out[0]["silver/documents"] and cluster_out[0] == local[0]
    assert cluster_out[1] == local[1] and cluster_out[2] == local[2]  # executors wrote byte-identical shards
