"""The whole demo, end to end, on the smoke profile with every durable path on s3:// (a real S3 API server,
moto, over HTTP): every stage produces something, the crawl's WARC files, the Delta tables, the tokenizer,
the shards and manifest, the checkpoints and the MLflow artifacts land in the bucket, and the lineage holds
from the trained model back to the crawled URLs.

One run serves every test: the local-disk paths are the same code with other configuration (`make demo`
runs them, and each stage's own tests cover them); only the bucket's paths need the whole pipeline."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import storage

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "conf" / "profiles" / "smoke.yaml"


@pytest.fixture(scope="module")
def demo_run(s3_server, tmp_path_factory):
    """(var, local, summary, stdout, env) of one smoke demo whose `var` is a bucket."""
    from tests.support.s3server import make_bucket, storage_overlay

    local = tmp_path_factory.mktemp("local")
    var = f"{make_bucket(s3_server.endpoint, 'weblm-demo')}/run"
    overlay = storage_overlay(local / "overlay.yaml", s3_server.endpoint,
                              extra={"paths": {"var": var, "local": str(local)}})
    env = dict(os.environ, WEBLM_CONF_OVERLAY=f"{SMOKE},{overlay}", SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, "-m", "demo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    os.environ["WEBLM_CONF_OVERLAY"] = str(overlay)  # this process reads the bucket with the same settings
    storage.reset()
    summary = json.loads(storage.read_text(f"{var}/demo/summary.json"))
    yield var, local, summary, proc.stdout, env
    del os.environ["WEBLM_CONF_OVERLAY"]
    storage.reset()


def delta_table(location: str, columns=None):
    from deltalake import DeltaTable

    table = DeltaTable(location, storage_options=storage.object_store_options(location))
    return table.to_pyarrow_table(columns=columns)


def crawled_urls(var: str) -> dict:
    bronze = delta_table(f"{var}/lake/bronze/pages", ["doc_id", "url"])
    return dict(zip(bronze.column("doc_id").to_pylist(), bronze.column("url").to_pylist()))


def test_notebook_traces_a_shard_sequence_to_its_warc_record(demo_run):
    *_, env = demo_run
    proc = subprocess.run([sys.executable, "notebooks/pipeline_overview.py"], cwd=ROOT,
                          env=dict(env, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"shard-00000-[0-9a-f]{16} sequence 0 ", proc.stdout), proc.stdout[-2000:]   # content-named
    assert "WARC record at offset" in proc.stdout and ".warc.gz" in proc.stdout
    # and forwards again with jobs.fate: its URL's capture, kept at every stage, into a shard sequence
    assert re.search(r"  ingest    doc [0-9a-f]{40}: HTTP 200.*\n  extract   kept \(\d[\d,]* chars\)", proc.stdout), \
        proc.stdout[-2000:]
    assert re.search(r"  export    kept\n +shard shard-\d{5}-[0-9a-f]{16} sequence \d+ ", proc.stdout), proc.stdout[-2000:]


def test_the_quality_report_notebook_shows_the_reports_numbers(demo_run):
    """notebooks/quality_report.py, run as a script the way its first cell says: the same kept share and documents
    per stage as `python -m jobs.report` gave the demo's summary."""
    *_, summary, _, env = demo_run
    proc = subprocess.run([sys.executable, "notebooks/quality_report.py"], cwd=ROOT,
                          env=dict(env, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = summary["report"]
    assert f"kept text share {report['kept_text_share']} in silver.deduped" in proc.stdout, proc.stdout[:2000]
    for stage, kept in report["stages"].items():   # the funnel: stage, status, documents in, kept, ...
        assert re.search(rf"\b{stage}\s+ok\s+\d+\s+{kept}\b", proc.stdout), (stage, proc.stdout[:2000])
    assert "language_score" in proc.stdout and "gopher_short_doc" in proc.stdout   # the signals and their rules


def test_every_stage_produced_output(demo_run):
    _, _, summary, stdout, _ = demo_run
    crawl = summary["crawl"]
    assert crawl["pages_fetched"] > 20 and crawl["warc_files"] >= 1 and crawl["warc_bytes"] > 0
    assert crawl["robots_denied"] > 0, "the local web has robots.txt disallows; the crawl must have obeyed some"
    tables = summary["tables"]
    assert tables["bronze.pages"]["rows"] >= tables["silver.documents"]["rows"] > 10
    # quality keeps a part of silver, dedup a part of that; tokenize and export take what dedup kept
    assert tables["silver.documents"]["rows"] >= tables["silver.quality"]["rows"] >= tables["silver.deduped"]["rows"] > 5
    assert tables["gold.tokens"]["rows"] == tables["silver.deduped"]["rows"] == summary["shards"]["documents"]
    assert summary["shards"]["tokens"] > 1000
    assert all(job.get("status") == "ok" for job in summary["jobs"].values())
    assert "weblm demo: summary" in stdout and summary["mlflow"]["run_id"] in stdout


def test_every_artifact_is_in_the_bucket(demo_run):
    var, local, summary, _, _ = demo_run
    warcs = storage.glob(f"{var}/warc", "*.warc.gz")
    assert len(warcs) == summary["crawl"]["warc_files"]
    for table in ("bronze/pages", "silver/documents", "silver/signals", "silver/quality", "gold/tokens"):
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


def test_training_loss_falls(demo_run):
    train = demo_run[2]["train"]
    assert train["steps"] == 40
    assert train["last_loss"] < train["first_loss"] - 0.5


def test_lineage_names_crawled_documents(demo_run):
    var, _, summary, _, _ = demo_run
    crawled = crawled_urls(var)
    batches = [json.loads(line) for line in storage.read_text(summary["train"]["lineage"]).splitlines()]
    assert [b["step"] for b in batches] == list(range(summary["train"]["steps"]))
    assert all(len(b["digest"]) == 64 for b in batches)   # lineage.detail=digest: the batches are recomputed
    # the demo's provenance stage recomputed every step's batch from the checkpoint and the shards, checked it
    # against those digests, and named the documents
    listing = [json.loads(line) for line in storage.read_text(summary["provenance"]["listing"]).splitlines()]
    seen = {d["doc_id"] for d in listing}
    assert seen and seen <= set(crawled), "every document a batch drew from must trace back to a crawled URL"
    assert all(crawled[d["doc_id"]] == d["url"] and d["url"].startswith("http://") for d in listing)


def test_mlflow_run_records_the_data_it_saw(demo_run):
    _, local, summary, _, _ = demo_run
    import mlflow

    tracking_uri = summary["mlflow"]["tracking_uri"]
    assert tracking_uri.startswith(f"sqlite:///{local}/"), "MLflow's sqlite store stays on local disk"
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    run = client.get_run(summary["mlflow"]["run_id"])
    losses = client.get_metric_history(run.info.run_id, "loss")
    assert len(losses) == summary["train"]["steps"]
    # MLflow caps a dataset digest at 36 characters; the full hash is a run parameter.
    digests = [d.dataset.digest for d in run.inputs.dataset_inputs]
    assert summary["shards"]["manifest_sha256"][:36] in digests
    assert run.data.params["manifest_sha256"] == summary["shards"]["manifest_sha256"]


def test_javascript_pages_were_rendered_and_ingested_from_their_dom(demo_run):
    summary = demo_run[2]
    render = summary["crawl"]["render"]
    assert render["renders"] > render["ok"] > 0, "the JS hosts need rendering; the trouble pages fail it"
    assert render["renders"] < 0.2 * render["html_pages"], "only the pages that need it go to the browser"
    assert render["text_chars_gained"] > 0 and render["recorded"] == render["ok"]
    assert {"failed/timeout", "failed/endless"} <= set(render), "a hanging and an endless page are counted failures"
    assert summary["jobs"]["ingest"]["pages_from_rendered_dom"] > 0


def test_the_quality_models_were_trained_by_the_project_and_scored_documents(demo_run):
    var, _, summary, _, _ = demo_run
    models = summary["models"]
    assert models["kenlm.en"]["cutoffs"]["source"] == "table:silver.documents"   # its English, read with delta-rs
    assert models["kenlm.en"]["cutoffs"]["documents"] > 0
    assert models["quality_classifier"]["heldout"]["positives"] > 0
    signals = delta_table(f"{var}/lake/silver/signals").to_pandas()
    english = signals[signals["language"] == "en"]
    assert len(english) and english["perplexity"].notna().all()
    assert set(english["perplexity_bucket"]) <= {"head", "middle", "tail"}
    assert set(signals.loc[signals["language"] != "en", "perplexity_bucket"]) <= {"no_model", "empty"}
    assert signals["quality_prob"].between(0, 1).all() and signals["toxic_words_ratio"].notna().all()


def test_the_per_stage_report_follows_the_tables(demo_run):
    summary = demo_run[2]
    report, tables = summary["report"], summary["tables"]
    assert "<img" in storage.read_text(report["html"])
    kept = report["stages"]
    assert kept["ingest"] == tables["bronze.pages"]["rows"] and kept["extract"] == tables["silver.documents"]["rows"]
    assert kept["quality"] == tables["silver.quality"]["rows"] and kept["dedup"] == tables["silver.deduped"]["rows"]
    assert 0 < report["kept_text_share"] < 1
