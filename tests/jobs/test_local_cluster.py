"""The pipeline on Spark's `local-cluster` master: two executor JVMs apart from the driver, as on a cluster.

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

from conftest import PAGES, write_warc

ROOT = Path(__file__).resolve().parents[2]


def run_pipeline(var: Path, master: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "jobs.pipeline", "--master", master, "-p", f"var={var}",
            "-o", "tokenize.vocab_size=400", "-o", "export.target_tokens_per_shard=400",
            "-o", "quality.mode=flag", "-o", "dedup.paragraphs.mode=flag"]  # the fixture pages repeat one sentence shape: flagged, not dropped
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


def test_local_cluster_run_equals_the_local_run(tmp_path):
    crawl = tmp_path / "crawl.warc.gz"
    write_warc(crawl, PAGES)  # once: record ids (hence doc_ids) are random per write
    runs = {}
    for master in ("local-cluster[2,1,1024]", "local[2]"):
        var = tmp_path / master.split("[")[0]
        (var / "warc").mkdir(parents=True)
        (var / "warc" / crawl.name).write_bytes(crawl.read_bytes())
        proc = run_pipeline(var, master)
        assert proc.returncode == 0, f"{master}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        state = json.loads((var / "lake" / "_pipeline" / "state.json").read_text())
        assert [s["status"] for s in state["stages"].values()] == ["ok"] * 6
        manifest = json.loads((var / "shards" / "manifest.json").read_text())
        shard_bytes = {s["prefix"]: (var / "shards" / f"{s['prefix']}.bin").read_bytes() for s in manifest["shards"]}
        runs[master] = (tables(var), manifest["totals"], shard_bytes)
    cluster, local = runs["local-cluster[2,1,1024]"], runs["local[2]"]
    assert cluster[0]["silver/documents"] and cluster[0] == local[0]
    assert cluster[1] == local[1] and cluster[2] == local[2]  # executors wrote byte-identical shards
