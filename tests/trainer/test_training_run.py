"""A finished run: the loss fell, MLflow holds what SEAMS §5 promises, lineage names the right documents."""
import json
import math
from pathlib import Path

import mlflow
import numpy as np
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset
from mlflow.tracking import MlflowClient

from trainer.backend import open_backend
from trainer.data import build_datasets
from trainer.manifest import load_manifest
from trainer.run_files import RunFiles


def test_loss_falls_on_learnable_data(trained_run):
    result = trained_run["result"]
    assert result["steps"] == 40
    assert result["last_loss"] < result["first_loss"] - 1.0, result
    assert result["tokens_seen"] == 40 * 16 * 64


def test_result_json_follows_the_seam(trained_run):
    out = trained_run["out"]
    written = json.loads((out / "result.json").read_text())
    assert set(written) == {"run_id", "steps", "first_loss", "last_loss", "tokens_seen", "checkpoint", "lineage",
                            "downstream", "stages", "shards_left_out"}
    assert written["downstream"] == {}    # no evaluation.tasks
    assert [s["stage"] for s in written["stages"]] == ["main"] and written["stages"][0]["first_step"] == 0
    assert written["shards_left_out"] == {}   # every shard of the tiny manifest fills train and valid samples
    assert Path(written["checkpoint"]).is_dir() and Path(written["checkpoint"]).name == "step-00000040"   # sharded
    assert Path(written["lineage"]) == out / "lineage" / "batches.jsonl"


def test_mlflow_run_has_params_metrics_dataset_and_artifacts(trained_run):
    mlflow.set_tracking_uri(trained_run["paths"].mlflow_tracking_uri)
    client = MlflowClient()
    run = client.get_run(trained_run["result"]["run_id"])
    manifest = load_manifest(trained_run["manifest"])
    assert run.info.status == "FINISHED"
    assert run.data.params["model.num_layers"] == "2" and run.data.params["optim.lr"] == "0.003"
    assert run.data.params["manifest_sha256"] == manifest.sha256
    assert run.data.tags["tokenizer_sha256"] == manifest.tokenizer_sha256
    assert run.data.tags["source.gold.tokens.version"] == "3"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(40))
    assert {m.step: m.value for m in history}[39] == trained_run["result"]["last_loss"]
    val = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "val_loss")}
    perplexity = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "val_perplexity")}
    assert len(val) == 2 and all(abs(perplexity[s] - math.exp(v)) < 1e-3 * perplexity[s] for s, v in val.items())
    assert {m.key for m in client.get_metric_history(run.info.run_id, "skipped_steps")} == {"skipped_steps"}
    checkpoints = trained_run["out"] / "checkpoints"
    for step in (20, 40):   # each checkpoint named with its sha256 (schedule.checkpoint_interval=20), the
        location, digest = run.data.tags[f"checkpoint.step-{step:08d}"].split(" sha256:")   # async step 20's too
        assert location == str(checkpoints / f"step-{step:08d}")
        assert digest == (checkpoints / f"step-{step:08d}.sha256").read_text().split()[0]
    (dataset_input,) = run.inputs.dataset_inputs
    assert manifest.sha256.startswith(dataset_input.dataset.digest)
    assert json.loads(dataset_input.dataset.source)["uri"].endswith("manifest.json")
    tags = {t.key: t.value for t in dataset_input.tags}
    assert tags["mlflow.data.context"] == "training" and tags["manifest_sha256"] == manifest.sha256
    # a file:// manifest is one dataset source; megatron's default cuda_graph_scope is not passed
    assert not [w for w in trained_run["warnings"] if "dataset source" in w or "full scope is deprecated" in w]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"lineage", "result.json"} <= artifacts
    assert [a.path for a in client.list_artifacts(run.info.run_id, "lineage")] == ["lineage/batches.jsonl"]


def test_lineage_names_exactly_the_documents_in_each_sample(trained_run):
    out, cfg = trained_run["out"], trained_run["cfg"]
    lines = [json.loads(line) for line in (out / "lineage" / "batches.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(40))
    assert all(len(line["samples"]) == cfg.batch.global_batch_size for line in lines)
    record = lines[7]["samples"][5]
    manifest = load_manifest(trained_run["manifest"])
    shard = next(s for s in manifest.shards if s.name == record["shard"])
    with open_backend(cfg):   # the sample itself, as the run drew it
        datasets = build_datasets(cfg, manifest, RunFiles(out).cache(manifest.sha256))
        sample = datasets.train[record["epoch_sample"]]
    window = np.append(sample["tokens"].numpy(), sample["labels"][-1].item())   # the seq_length+1 tokens read
    # By hand: concatenate the listed sequences from the shard; the window must lie inside that run of
    # documents, starting in the first and ending in the last, so every listed document gave tokens.
    indexed = IndexedDataset(shard.prefix)
    docs = [np.asarray(indexed[i], dtype=np.int64) for i in record["sequences"]]
    joined = np.concatenate(docs)
    starts = [s for s in range(len(joined) - len(window) + 1) if (joined[s:s + len(window)] == window).all()]
    assert len(starts) == 1
    assert starts[0] < len(docs[0]) and starts[0] + len(window) > len(joined) - len(docs[-1])
    sidecar = [json.loads(line) for line in shard.docs_path.read_text().splitlines()]
    assert record["doc_ids"] == [sidecar[i]["doc_id"] for i in record["sequences"]]
    assert set(record["doc_ids"]) <= set(lines[7]["doc_ids"])


def test_validation_loss_per_source_of_the_mix(trained_run, tmp_path):
    from shardkit import EOD, SOURCES
    from trainer.data import eval_batches
    from trainer.manifest import read_sources

    client = MlflowClient(tracking_uri=trained_run["paths"].mlflow_tracking_uri)
    run_id = trained_run["result"]["run_id"]
    overall = {m.step: m.value for m in client.get_metric_history(run_id, "val_loss")}
    per_source = {s: {m.step: m.value for m in client.get_metric_history(run_id, f"val_loss.{s}")} for s in SOURCES}
    assert all(set(losses) == set(overall) for losses in per_source.values())
    assert {m.key for m in client.get_metric_history(run_id, "val_perplexity.code")} == {"val_perplexity.code"}
    # the labels of every validation sample carry the source of the document they belong to
    cfg, manifest = trained_run["cfg"], load_manifest(trained_run["manifest"])
    with open_backend(cfg):
        datasets = build_datasets(cfg, manifest, tmp_path)
        batches = eval_batches(cfg, datasets, manifest.eod_id)
        tokens = {s: 0.0 for s in SOURCES}
        for batch in batches:
            for name in SOURCES:
                tokens[name] += (batch.loss_mask * (batch.source_ids == datasets.source_names.index(name))).sum()
            for row, ids in zip(batch.tokens, batch.source_ids):   # a source changes only right after an EOD
                changes = torch.nonzero(ids[1:] != ids[:-1]).flatten()
                assert all(row[i] == EOD for i in changes)
    assert datasets.source_names == sorted(SOURCES) and all(tokens[s] > 0 for s in SOURCES)
    sources = {s for shard in manifest.shards for s in read_sources(shard)}
    assert sources == set(SOURCES)
    # the overall loss is the token-weighted mean of the per-source losses (same batches, same checkpoint)
    step = max(overall)
    weighted = sum(per_source[s][step] * float(tokens[s]) for s in SOURCES) / sum(float(t) for t in tokens.values())
    assert abs(weighted - overall[step]) < 1e-4 * overall[step]
