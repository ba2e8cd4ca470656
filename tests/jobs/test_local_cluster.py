"""The pipeline on Spark's `local-cluster` master: an executor JVM apart from the driver, as on a cluster, running
two tasks at a time.  (Two one-core executors cost 277 s for this run against 216 s for one two-core executor,
measured one after the other on the CI machine; what crosses the process boundary is the same.)

Everything that crosses a process boundary is exercised for real: closures and Arrow batches serialized
to executors, executor-side imports of the jobs' modules and of their config, the jars shipped through
`spark.jars`, and shards written by executors.  The result must equal what the in-process run wrote."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable

from conftest import pipeline_options

ROOT = Path(__file__).resolve().parents[2]
MASTER = "local-cluster[1,2,1024]"


def run_on_local_cluster(var: Path, warc_dir: Path) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "jobs.pipeline", "--master", MASTER, *pipeline_options(var, warc_dir)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
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


def test_local_cluster_run_equals_the_local_run(tmp_path, crawl, pipeline_runs):
    """The same crawl (a damaged file included) and settings as the in-process `jobs.pipeline` runs of
    test_pipeline.py, whose final lake (failed, resumed, export again: equal to an uninterrupted run) is the
    reference; the cluster run extracts in the sandbox (the default), the reference without it."""
    proc = run_on_local_cluster(tmp_path, crawl.warc_dir)
    assert proc.returncode == 0, f"{MASTER}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    state = json.loads((tmp_path / "lake" / "_pipeline" / "state.json").read_text())
    assert [s["status"] for s in state["stages"].values()] == ["ok"] * 6
    cluster, local = outputs(tmp_path), outputs(pipeline_runs.lake.parent)
    assert cluster[0]["silver/documents"] and cluster[0] == local[0]
    assert cluster[1] == local[1] and cluster[2] == local[2]  # executors wrote byte-identical shards
