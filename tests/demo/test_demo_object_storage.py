"""The whole demo with every durable path on s3:// (a real S3 API server, moto, over HTTP): the crawl's
WARC files, the Delta tables, the tokenizer, the shards and manifest, the checkpoints and the MLflow
artifacts all land in the bucket, and the lineage still holds.  Only configuration differs from the
local run: the code paths are the ones a user runs against S3."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import storage

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "conf" / "profiles" / "smoke.yaml"


@pytest.fixture(scope="module")
def s3_demo(s3_server, tmp_path_factory):
    from tests.support.s3server import make_bucket, storage_overlay

    local = tmp_path_factory.mktemp("local")
    bucket = make_bucket(s3_server.endpoint, "weblm-demo")
    var = f"{bucket}/run"
    overlay = storage_overlay(local / "overlay.yaml", s3_server.endpoint,
                              extra={"paths": {"var": var, "local": str(local)},
                                     # the local demo test covers rendering and the quality models; here only
                                     # the storage paths differ, so the run stays short
                                     "demo": {"render_js": "never", "quality_models": False}})
    env = dict(os.environ, WEBLM_CONF_OVERLAY=f"{SMOKE},{overlay}", SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-m", "demo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    os.environ["WEBLM_CONF_OVERLAY"] = str(overlay)  # this process reads the bucket with the same settings
    storage.reset()
    summary = json.loads(storage.read_text(f"{var}/demo/summary.json"))
    yield var, local, summary
    del os.environ["WEBLM_CONF_OVERLAY"]
    storage.reset()


def test_every_artifact_is_in_the_bucket(s3_demo):
    var, local, summary = s3_demo
    assert summary["crawl"]["warc_files"] >= 1
    warcs = storage.glob(f"{var}/warc", "*.warc.gz")
    assert len(warcs) == summary["crawl"]["warc_files"]
    for table in ("bronze/pages", "silver/documents", "gold/tokens"):
        assert storage.glob(f"{var}/lake/{table}/_delta_log", "*.json"), table
    manifest = json.loads(storage.read_text(f"{var}/shards/manifest.json"))
    for shard in manifest["shards"]:
        assert storage.exists(f"{var}/shards/{shard['prefix']}.bin")
    assert manifest["tokenizer"]["model"].startswith(f"{var}/tokenizer/")
    assert summary["train"]["checkpoint"].startswith(f"{var}/train/")
    assert storage.exists(summary["train"]["checkpoint"]) or storage.glob(summary["train"]["checkpoint"], "*")
    assert storage.glob(f"{var}/mlflow/artifacts", "*"), "MLflow artifacts belong in the bucket"
    # nothing durable was left behind on local disk: the upload buffers are empty
    assert not list((local / "warc-buffer").glob("*.warc*")), "every WARC file left the buffer for the bucket"


def test_the_pipeline_produced_the_same_kind_of_run_as_locally(s3_demo):
    _, _, summary = s3_demo
    tables = summary["tables"]
    assert summary["crawl"]["pages_fetched"] > 20
    assert tables["bronze.pages"]["rows"] >= tables["silver.documents"]["rows"] > 10
    # quality keeps a part of silver, dedup a part of that; tokenize and export take what dedup kept
    assert tables["silver.documents"]["rows"] >= tables["silver.quality"]["rows"] >= tables["silver.deduped"]["rows"] > 5
    assert tables["gold.tokens"]["rows"] == tables["silver.deduped"]["rows"] == summary["shards"]["documents"]
    assert summary["train"]["steps"] == 40 and summary["train"]["last_loss"] < summary["train"]["first_loss"] - 0.5
    assert all(job.get("status") == "ok" for job in summary["jobs"].values())


def test_lineage_from_the_bucket_names_crawled_documents(s3_demo):
    var, _, summary = s3_demo
    from deltalake import DeltaTable

    location = f"{var}/lake/bronze/pages"
    bronze = DeltaTable(location, storage_options=storage.object_store_options(location)).to_pyarrow_table(
        columns=["doc_id", "url"])
    crawled = dict(zip(bronze.column("doc_id").to_pylist(), bronze.column("url").to_pylist()))
    listing = [json.loads(line) for line in Path(summary["provenance"]["listing"]).read_text().splitlines()]
    assert listing and all(crawled[d["doc_id"]] == d["url"] for d in listing)
