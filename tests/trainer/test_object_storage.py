"""The trainer on object storage (a real S3 API server, moto, over HTTP): shards staged into the local cache by
content hash and verified, checkpoints uploaded in the background, resume from the bucket, MLflow artifacts in
the bucket, a corrupt shard refused before step 1, and a store outage that loses no checkpoint; and a run on a real
GCS JSON API server (fake-gcs-server)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import mlflow
import pytest
import torch
from mlflow.tracking import MlflowClient

import storage
from conf.paths import load_paths
from conftest import TINY, mlflow_uri, tiny_config, tmp_paths
from shardkit import build_shards
from tests.support.s3server import FlakyRelay, storage_overlay
from trainer import checkpoint
from trainer.checkpoint import CheckpointError
from trainer.input_cache import StagingReport, open_manifest
from trainer.manifest import file_sha256
from trainer.provenance import documents_seen
from trainer.provenance import main as provenance_main
from trainer.node_folders import NodeFolder
from trainer.run_files import node_staging, staging_folder
from trainer.run_folder import RunFolder
from trainer.train import main as train_main
from trainer.train import train

ROOT = Path(__file__).resolve().parents[2]
STEPS = 10
GATHERED = "schedule.checkpoint_format=gathered"   # one step-N.pt per checkpoint; the resume test runs sharded


@pytest.fixture(autouse=True)
def mlflow_s3_environment():
    """The trainer hands conf/storage.yaml's endpoint to MLflow's boto3 client through the environment; undo it."""
    names = ("MLFLOW_S3_ENDPOINT_URL", "MLFLOW_BOTO_CLIENT_ADDRESSING_STYLE", "STORAGE_EMULATOR_HOST")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def bucket_paths(root: Path, bucket: str, train: str = "train"):
    """Shards, run folder and MLflow artifacts in the bucket; cache, staging and MLflow's sqlite store under root."""
    return load_paths([f"local={root}/local", f"mlflow_tracking_uri={mlflow_uri(root / 'mlflow.db')}",
                       f"shards_dir={bucket}/shards", f"train_dir={bucket}/{train}",
                       f"mlflow_artifacts={bucket}/mlflow"])


def upload_shards(folder: Path, bucket: str) -> str:
    storage.copy_tree(str(folder), f"{bucket}/shards")
    return f"{bucket}/shards/manifest.json"


def stored_checkpoints(paths) -> list[str]:
    """The stored checkpoints (step-N.pt files, step-N/ folders); each must sit beside its sha256 sidecar, and no
    sidecar outlives its checkpoint."""
    names = [uri.rstrip("/").rsplit("/", 1)[-1] for uri in storage.listdir(f"{paths.train_dir}/checkpoints")]
    checkpoints = sorted(n for n in names if not n.endswith(".sha256"))
    assert sorted(n for n in names if n.endswith(".sha256")) == [c + ".sha256" for c in checkpoints], names
    return checkpoints


def staged_checkpoints(paths) -> list[str]:
    return sorted(p.name for p in (staging_folder(paths.train_staging, paths.train_dir) / "checkpoints").glob("*.pt"))


def download(uri: str, tmp_path: Path) -> Path:
    local = tmp_path / "downloaded" / uri.rsplit("/", 1)[-1]
    storage.get_file(uri, local)
    return local


def losses(paths, run_id) -> dict[int, float]:
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    return {m.step: m.value for m in MlflowClient().get_metric_history(run_id, "loss")}


def checkpoint_tags(paths, run_id) -> dict[int, tuple[str, str]]:
    """The run's `checkpoint.step-N` tags: step -> (location, sha256)."""
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    tags = MlflowClient().get_run(run_id).data.tags
    return {int(key.rsplit("-", 1)[1]): tuple(value.split(" sha256:"))
            for key, value in tags.items() if key.startswith("checkpoint.step-")}


def stored_digest(location: str) -> str:
    return storage.read_text(f"{location}.sha256").split()[0]


def test_a_run_on_object_storage_stages_its_inputs_once_and_uploads_its_outputs(s3, s3_server, tmp_path, caplog,
                                                                             monkeypatch):
    tokenizer = b"a SentencePiece model, as far as the trainer can tell"
    tokenizer_uri = f"{s3}/tokenizer/3f2a/spm.model"
    storage.write_bytes(tokenizer_uri, tokenizer)
    manifest_uri = upload_shards(build_shards(tmp_path / "export", tokenizer=(
        tokenizer_uri, hashlib.sha256(tokenizer).hexdigest())).parent, s3)
    manifest = json.loads(storage.read_text(manifest_uri))
    # A stale value: MLflow must get the endpoint from conf/storage.yaml, the one place it is configured.
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    cfg = tiny_config(f"schedule.steps={STEPS}", "schedule.checkpoint_interval=3", "schedule.eval_interval=0", GATHERED)
    paths = bucket_paths(tmp_path, s3)

    with caplog.at_level("INFO", logger="trainer"):
        result = train(cfg, paths)

    # Inputs: the manifest's folder, mirrored under its sha256, every shard file as the manifest says.
    staged = Path(paths.cache_dir) / "shards" / manifest["sha256"]
    for shard in manifest["shards"]:
        assert file_sha256(staged / f"{shard['prefix']}.bin") == shard["bin_sha256"]
        assert file_sha256(staged / f"{shard['prefix']}.idx") == shard["idx_sha256"]
        assert (staged / shard["docs"]).read_bytes() == storage.read_bytes(f"{s3}/shards/{shard['docs']}")
    assert (Path(paths.cache_dir) / "tokenizers" / hashlib.sha256(tokenizer).hexdigest() / "spm.model"
            ).read_bytes() == tokenizer
    assert f"staged {manifest_uri} into {staged}" in caplog.text and "7 file(s) downloaded" in caplog.text

    # Outputs: the checkpoints (the newest keep_checkpoints=2), result.json and the lineage are in the bucket,
    # and staging holds nothing the bucket lacks.
    assert result["checkpoint"] == f"{s3}/train/checkpoints/step-00000010.pt"
    assert stored_checkpoints(paths) == ["step-00000009.pt", "step-00000010.pt"]
    assert staged_checkpoints(paths) == []
    assert json.loads(storage.read_text(f"{s3}/train/result.json")) == result
    assert result["lineage"] == f"{s3}/train/lineage/batches.jsonl"
    lineage = storage.read_text(result["lineage"]).splitlines()
    assert [json.loads(line)["step"] for line in lineage] == list(range(STEPS))
    assert f"every file of the run is in {s3}/train" in caplog.text
    meta = torch.load(download(result["checkpoint"], tmp_path), weights_only=False)["meta"]
    assert meta["manifest_path"] == manifest_uri and meta["tokenizer_model"] == tokenizer_uri

    # MLflow: artifacts in the bucket through the configured endpoint; the manifest and tokenizer named by URI.
    assert os.environ["MLFLOW_S3_ENDPOINT_URL"] == s3_server.endpoint
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    run = MlflowClient().get_run(result["run_id"])
    assert run.info.artifact_uri.startswith(f"{s3}/mlflow/")
    assert json.loads(storage.read_text(f"{run.info.artifact_uri}/result.json")) == result
    assert storage.exists(f"{run.info.artifact_uri}/lineage/batches.jsonl")
    assert {a.path for a in MlflowClient().list_artifacts(run.info.run_id)} >= {"lineage", "result.json"}
    assert run.data.tags["manifest_path"] == manifest_uri and run.data.tags["tokenizer_model"] == tokenizer_uri
    # Each checkpoint is named once the bucket holds it: the two kept are there, with the sha256 stored beside them.
    tags = checkpoint_tags(paths, result["run_id"])
    assert {step: location for step, (location, _) in tags.items()} == {
        step: f"{s3}/train/checkpoints/step-{step:08d}.pt" for step in (3, 6, 9, 10)}
    assert all(tags[step][1] == stored_digest(tags[step][0]) for step in (9, 10))
    (dataset_input,) = run.inputs.dataset_inputs
    assert json.loads(dataset_input.dataset.source)["uri"] == manifest_uri

    # A second run on the same machine reuses the cache: every cached file is checked, none fetched again.
    before = {p: p.stat().st_mtime_ns for p in Path(paths.cache_dir).rglob("*") if p.is_file()}
    caplog.clear()
    with caplog.at_level("INFO", logger="trainer"):
        again = train(cfg, bucket_paths(tmp_path, s3, train="train-2"))
    assert "0 file(s) downloaded (0.0 MiB), 7 cached copies reused" in caplog.text
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert again["last_loss"] == result["last_loss"]


def test_a_run_on_gcs_stages_its_shards_and_keeps_its_checkpoints_and_mlflow_artifacts_in_the_bucket(
        gcs, tmp_path, caplog):
    """The same run with every remote path on gs://: gcsfs for the shards and the run folder, MLflow's
    google-cloud-storage client for its artifacts, both pointed at the server by conf/storage.yaml alone."""
    manifest_uri = upload_shards(build_shards(tmp_path / "export").parent, gcs)
    manifest = json.loads(storage.read_text(manifest_uri))
    cfg = tiny_config(f"schedule.steps={STEPS}", "schedule.checkpoint_interval=5", "schedule.eval_interval=0", GATHERED)
    paths = bucket_paths(tmp_path, gcs)
    with caplog.at_level("INFO", logger="trainer"):
        result = train(cfg, paths)
    staged = Path(paths.cache_dir) / "shards" / manifest["sha256"]
    for shard in manifest["shards"]:
        assert file_sha256(staged / f"{shard['prefix']}.bin") == shard["bin_sha256"]
    assert result["checkpoint"] == f"{gcs}/train/checkpoints/step-00000010.pt"
    assert stored_checkpoints(paths) == ["step-00000005.pt", "step-00000010.pt"]
    assert json.loads(storage.read_text(f"{gcs}/train/result.json")) == result
    lineage = storage.read_text(result["lineage"]).splitlines()
    assert [json.loads(line)["step"] for line in lineage] == list(range(STEPS))
    assert f"every file of the run is in {gcs}/train" in caplog.text
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    run = MlflowClient().get_run(result["run_id"])
    assert run.info.artifact_uri.startswith(f"{gcs}/mlflow/")
    assert json.loads(storage.read_text(f"{run.info.artifact_uri}/result.json")) == result
    assert {a.path for a in MlflowClient().list_artifacts(run.info.run_id)} >= {"lineage", "result.json"}
    tags = checkpoint_tags(paths, result["run_id"])
    assert tags[10] == (result["checkpoint"], stored_digest(result["checkpoint"]))


RESUMED = (f"schedule.steps={STEPS}", "schedule.checkpoint_interval=3", "schedule.eval_interval=0",
           "schedule.keep_checkpoints=4")


def test_resume_from_the_bucket_matches_an_uninterrupted_run(s3, tmp_path, manifest_path, caplog, capsys):
    """Killed after step 7, resumed from the bucket in one process; then resumed from step 6 once more on two
    machines without shared staging: the same losses as a run never interrupted, every time."""
    manifest_uri = upload_shards(manifest_path.parent, s3)
    cfg = tiny_config(*RESUMED)
    straight_paths, paths = tmp_paths(tmp_path / "straight"), bucket_paths(tmp_path / "killed", s3)
    straight = train(cfg, straight_paths, manifest_path)

    # Sharded checkpoints (the default), saved asynchronously, go up as folders.  Killed after step 7 (the newest
    # checkpoint is step 6), then a new machine: no staging, no cache.
    assert train(cfg, paths, stop_after=7) is None
    assert stored_checkpoints(paths) == ["step-00000003", "step-00000006"]
    assert storage.exists(f"{s3}/train/checkpoints/step-00000006/SHA256SUMS")
    with pytest.raises(CheckpointError, match=f"{s3}/train/checkpoints holds checkpoints of an earlier run"):
        train(cfg, paths)
    # an upload cut short (no SHA256SUMS, which goes last) is no checkpoint; the run writes that step again whole
    storage.write_bytes(f"{s3}/train/checkpoints/step-00000009/__0_0.distcp", b"half a shard")
    assert checkpoint.stored_checkpoints(f"{s3}/train/checkpoints") == ["step-00000003", "step-00000006"]
    shutil.rmtree(paths.local)
    with caplog.at_level("INFO", logger="trainer"):
        resumed = train(cfg, paths, resume=True)
    assert f"downloaded {s3}/train/checkpoints/step-00000006 " in caplog.text
    assert f"resuming from {s3}/train/checkpoints/step-00000006 at step 6/10" in caplog.text
    assert stored_checkpoints(paths) == ["step-00000003", "step-00000006", "step-00000009", "step-00000010"]
    again = checkpoint.read_checkpoint(checkpoint.download_checkpoint(f"{s3}/train/checkpoints/step-00000009",
                                                                      tmp_path / "step-00000009"))
    assert again["progress"]["step"] == 9   # the checksums of the folder as uploaded hold
    tags = checkpoint_tags(paths, resumed["run_id"])   # the killed start's two and the resumed start's two
    assert {step: location for step, (location, _) in tags.items()} == {
        step: f"{s3}/train/checkpoints/step-{step:08d}" for step in (3, 6, 9, 10)}
    assert all(tags[step][1] == stored_digest(tags[step][0]) for step in (9, 10))

    assert resumed["first_loss"] == straight["first_loss"]
    expected, got = losses(straight_paths, straight["run_id"]), losses(paths, resumed["run_id"])
    for step in range(6, STEPS):
        assert got[step] == pytest.approx(expected[step], abs=1e-5), step
    straight_lineage = (Path(straight_paths.train_dir) / "lineage" / "batches.jsonl").read_text()
    assert storage.read_text(resumed["lineage"]) == straight_lineage   # same batches, each step recorded once

    # The checkpoint in the bucket names the documents it saw, as the local one does; the listing can go there too.
    _, seen_local = documents_seen(straight["checkpoint"])
    _, seen_remote = documents_seen(resumed["checkpoint"], cache_dir=str(tmp_path / "provenance-cache"))
    assert seen_remote == seen_local
    listing = f"{s3}/train/documents_seen.jsonl"
    assert provenance_main([resumed["checkpoint"], "--out", listing,
                            "-o", f"paths.cache_dir={tmp_path / 'provenance-cache'}"]) == 0
    assert len(storage.read_text(listing).splitlines()) == len(seen_local)
    assert f"saw {len(seen_local)} documents" in capsys.readouterr().out

    # From step 6 again, on two new machines (pipeline stage 1 on the second) that share no staging
    folder = f"{s3}/train/checkpoints"
    for name in ("step-00000009", "step-00000010"):
        checkpoint.remove_stored(folder, name)
    logs = two_machines(manifest_uri, tmp_path / "cluster", s3, paths.mlflow_tracking_uri, "--resume")
    assert f"resuming from {folder}/step-00000006 at step 6/10" in logs[0]
    assert f"downloaded {folder}/step-00000006 " in logs[0] and f"downloaded {folder}/step-00000006 " in logs[1]
    assert checkpoint.stored_checkpoints(folder) == ["step-00000003", "step-00000006", "step-00000009",
                                                     "step-00000010"]
    stored = [uri.rsplit("/", 1)[-1] for uri in storage.listdir(f"{folder}/step-00000009")]
    assert "rng-00001.pt" in stored and "SHA256SUMS.rank-00001" in stored   # sent by the second machine
    assert any(name.startswith("__1_") for name in stored)                  # stage 1's weights and moments
    for node in (0, 1):   # nothing left staged on either machine
        assert not list((tmp_path / "cluster" / f"node{node}").rglob("checkpoints/step-*/*")), node
    again = checkpoint.whole_state(checkpoint.download_checkpoint(f"{folder}/step-00000010", tmp_path / "two"))
    assert list(again["model"]) == list(checkpoint.whole_state(
        checkpoint.download_checkpoint(f"{folder}/step-00000006", tmp_path / "six"))["model"])   # every stage
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    logged = MlflowClient().get_metric_history(resumed["run_id"], "loss")
    for step in range(6, STEPS):   # by the one-process resume and the two machines (step 6 by the first start too)
        values = [m.value for m in logged if m.step == step]
        assert len(values) == (3 if step == 6 else 2), (step, values)
        assert values == pytest.approx([expected[step]] * len(values), abs=1e-5), (step, values)


def test_a_corrupt_shard_in_the_bucket_stops_training_before_step_1(s3, tmp_path, manifest_path, caplog, capsys):
    manifest_uri = upload_shards(manifest_path.parent, s3)
    data = bytearray(storage.read_bytes(f"{s3}/shards/shard-00001.bin"))
    data[10] ^= 0xFF
    storage.write_bytes(f"{s3}/shards/shard-00001.bin", bytes(data))
    paths = bucket_paths(tmp_path, s3)
    overrides = [f"paths.{key}={getattr(paths, key)}" for key in ("local", "mlflow_tracking_uri", "shards_dir",
                                                                  "train_dir", "mlflow_artifacts")]
    with caplog.at_level("WARNING", logger="trainer"):
        code = train_main([x for o in [*TINY, "schedule.steps=5", *overrides] for x in ("-o", o)])
    assert code == 2
    err = capsys.readouterr().err
    assert re.search(r"shard shard-00001: shard-00001.bin sha256 does not match the manifest's bin_sha256 "
                     rf"\(\w{{12}}…\): {s3}/shards/shard-00001.bin gave \w{{12}}… in 2 download\(s\); the object is "
                     r"corrupt or was rewritten after the manifest \(re-run the export job\)", err), err
    assert "(download 1 of 2); downloading again" in caplog.text   # fetched once more before giving up
    client = MlflowClient(paths.mlflow_tracking_uri)
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])   # no run was started
    assert storage.listdir(paths.train_dir) == [] and not Path(paths.train_staging).exists()
    sha = json.loads(manifest_path.read_text())["sha256"]
    assert not (Path(paths.cache_dir) / "shards" / sha / "shard-00001.bin").exists()   # nothing corrupt is cached

    # The bucket repaired, a corrupted cached copy is not trusted: it is fetched again, the rest reused.
    storage.put_file(manifest_path.parent / "shard-00001.bin", f"{s3}/shards/shard-00001.bin")
    cached = Path(paths.cache_dir) / "shards" / sha / "shard-00000.bin"
    cached.write_bytes(b"\0" + cached.read_bytes()[1:])
    report = StagingReport()
    manifest = open_manifest(manifest_uri, paths.cache_dir, attempts=2, report=report)
    assert sorted(Path(p).name for p in report.downloaded) == ["shard-00000.bin", "shard-00001.bin",
                                                               "shard-00001.docs.jsonl", "shard-00001.idx"]
    assert file_sha256(cached) == json.loads(manifest_path.read_text())["shards"][0]["bin_sha256"]
    assert manifest.location == manifest_uri and manifest.path.parent == cached.parent


class StepWatcher(logging.Handler):
    """Acts on the trainer's progress lines (`step      2/10 | ...`): the test's clock is the training step."""

    def __init__(self, actions: dict[int, Callable[[], None]]):
        super().__init__()
        self.actions = actions

    def emit(self, record: logging.LogRecord) -> None:
        found = re.match(r"step +(\d+)/", record.getMessage())
        if found and int(found.group(1)) in self.actions:
            self.actions.pop(int(found.group(1)))()


@contextlib.contextmanager
def watching(actions: dict[int, Callable[[], None]]):
    watcher, logger = StepWatcher(actions), logging.getLogger("trainer")
    level = logger.level
    logger.setLevel(logging.INFO)   # the progress lines are INFO
    logger.addHandler(watcher)
    try:
        yield
    finally:
        logger.removeHandler(watcher)
        logger.setLevel(level)
    assert not actions, f"the run never logged steps {sorted(actions)}"


class OutageRelay(FlakyRelay):
    """A FlakyRelay whose outage also cuts the connections already open: the clients' pooled keep-alive
    connections (s3fs, boto3) would otherwise carry on through an outage that only refuses new ones."""

    def __init__(self, target_port: int) -> None:
        self.open_sockets: set[socket.socket] = set()
        super().__init__(target_port)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        self.open_sockets.add(src)
        try:
            FlakyRelay._pipe(src, dst)
        finally:
            self.open_sockets.discard(src)

    def go_down(self) -> None:
        self.refusing.set()
        for sock in list(self.open_sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def outage(s3, s3_server):
    """The bucket's server behind a relay that can go down; the test points conf/storage.yaml at it."""
    relay = OutageRelay(s3_server.port)
    yield relay
    relay.close()


def behind_relay(relay: FlakyRelay, tmp_path: Path, monkeypatch, **upload) -> None:
    """Reach the store through the relay, with quick upload retries so the tests stay short."""
    overlay = storage_overlay(tmp_path / "relay.yaml", relay.endpoint, extra={"storage": {"upload": upload}})
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(overlay))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")   # MLflow's boto3 client: fail fast while the store is down
    storage.reset()


def test_uploads_wait_out_an_outage_during_training(s3, outage, tmp_path, manifest_path, monkeypatch, caplog):
    upload_shards(manifest_path.parent, s3)
    behind_relay(outage, tmp_path, monkeypatch, retries=200, backoff_initial_s=0.05, backoff_max_s=0.2, workers=2)
    cfg = tiny_config(f"schedule.steps={STEPS}", "schedule.checkpoint_interval=3", "schedule.keep_checkpoints=10",
                      "schedule.eval_interval=0", "schedule.log_interval=1", GATHERED)
    paths = bucket_paths(tmp_path, s3)
    seen_during_outage = []

    def end_outage():   # once an upload has failed outright (the clients' own retries spent), not before
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                r.name == "weblm.storage.upload" and "retrying in" in r.getMessage() for r in caplog.records):
            time.sleep(0.05)
        seen_during_outage.extend(staged_checkpoints(paths))
        outage.refusing.clear()

    with watching({2: outage.go_down, 8: end_outage}), caplog.at_level("INFO", logger="trainer"):
        result = train(cfg, paths)

    retried = re.search(rf"every file of the run is in {s3}/train \(\d+ uploaded, [\d.]+ MiB; (\d+) failed attempts "
                        r"retried\)", caplog.text)
    assert outage.refused > 0 and retried and int(retried.group(1)) > 0, caplog.text
    assert seen_during_outage == ["step-00000003.pt", "step-00000006.pt"]   # waiting in staging, not lost
    assert stored_checkpoints(paths) == [f"step-{s:08d}.pt" for s in (3, 6, 9, 10)]
    assert staged_checkpoints(paths) == []
    assert json.loads(storage.read_text(f"{s3}/train/result.json")) == result
    assert len(storage.read_text(f"{s3}/train/lineage/batches.jsonl").splitlines()) == STEPS


def test_files_an_outage_keeps_from_the_store_stay_in_staging_and_go_on_the_next_start(
        s3, outage, tmp_path, manifest_path, monkeypatch, caplog):
    upload_shards(manifest_path.parent, s3)
    behind_relay(outage, tmp_path, monkeypatch, retries=2, backoff_initial_s=0.05, backoff_max_s=0.1, workers=2)
    cfg = tiny_config(f"schedule.steps={STEPS}", "schedule.checkpoint_interval=5", "schedule.keep_checkpoints=10",
                      "schedule.eval_interval=0", "schedule.log_interval=1", GATHERED)
    paths = bucket_paths(tmp_path, s3)
    with watching({2: outage.go_down}), caplog.at_level("INFO", logger="trainer"):   # down from step 2 to the end
        result = train(cfg, paths)

    staging = staging_folder(paths.train_staging, paths.train_dir)
    left = ["checkpoints/step-00000005.pt", "checkpoints/step-00000005.pt.sha256", "checkpoints/step-00000010.pt",
            "checkpoints/step-00000010.pt.sha256", "outbox/lineage/batches.jsonl", "outbox/result.json"]
    assert sorted(str(p.relative_to(staging)) for p in staging.rglob("*")
                  if p.is_file() and (p.parent.name == "checkpoints" or "outbox" in p.parts)) == left
    assert f"6 file(s) not yet in {s3}/train stay in {staging}" in caplog.text
    assert "MLflow could not store artifact result.json" in caplog.text
    assert result["checkpoint"] == f"{s3}/train/checkpoints/step-00000010.pt"   # where it will be

    outage.refusing.clear()
    assert stored_checkpoints(paths) == []
    assert checkpoint_tags(paths, result["run_id"]) == {}   # none reached the bucket, so none is named
    caplog.clear()
    with caplog.at_level("INFO", logger="trainer"):
        again = train(cfg, paths, resume=True)   # the next start sends what was left, then finds nothing to train
    assert f"6 file(s) an earlier run left in {staging} are being uploaded to {s3}/train" in caplog.text
    assert again["steps"] == STEPS and again["last_loss"] == result["last_loss"]
    assert stored_checkpoints(paths) == ["step-00000005.pt", "step-00000010.pt"]
    assert staged_checkpoints(paths) == [] and not any(p.is_file() for p in (staging / "outbox").rglob("*"))
    assert json.loads(storage.read_text(f"{s3}/train/result.json")) == again
    assert len(storage.read_text(f"{s3}/train/lineage/batches.jsonl").splitlines()) == STEPS
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    run = MlflowClient().get_run(again["run_id"])
    assert run.info.run_id == result["run_id"] and storage.exists(f"{run.info.artifact_uri}/result.json")
    tags = checkpoint_tags(paths, result["run_id"])   # named by the start that sent them, once they landed
    assert tags == {step: (f"{s3}/train/checkpoints/step-{step:08d}.pt",
                           stored_digest(f"{s3}/train/checkpoints/step-{step:08d}.pt")) for step in (5, 10)}


def test_each_machine_stages_its_own_shards_only_when_the_ranks_span_machines_without_shared_staging(tmp_path):
    one_machine = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}
    two_machines = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert node_staging("s3://b/train", sharded=True, shared_staging=False, environ=two_machines)
    assert not node_staging("s3://b/train", sharded=True, shared_staging=False, environ=one_machine)
    assert not node_staging("s3://b/train", sharded=False, shared_staging=False, environ=two_machines)
    assert not node_staging("s3://b/train", sharded=True, shared_staging=True, environ=two_machines)
    assert not node_staging(str(tmp_path / "train"), sharded=True, shared_staging=False, environ=two_machines)
    assert not node_staging("s3://b/train", sharded=True, shared_staging=False, environ={})


def staged_sharded(folder: Path, step: int, elsewhere: dict[str, bytes]) -> tuple[Path, str]:
    """A visible sharded checkpoint as rank 0's machine stages it per node: its own files, and a SHA256SUMS that also
    lists `elsewhere`, the files another machine holds.  Returns the folder and the sha256 of its SHA256SUMS."""
    path = folder / f"step-{step:08d}"
    path.mkdir(parents=True)
    (path / "common.pt").write_bytes(b"common state")
    (path / ".metadata").write_bytes(b"metadata")
    own = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in ("common.pt", ".metadata")}
    others = {name: hashlib.sha256(data).hexdigest() for name, data in elsewhere.items()}
    sums = "".join(f"{digest}  {name}\n" for name, digest in sorted((own | others).items()))
    (path / "SHA256SUMS").write_text(sums)
    digest = hashlib.sha256(sums.encode()).hexdigest()
    checkpoint.checksum_path(path).write_text(f"{digest}  {path.name}/SHA256SUMS\n")
    return path, digest


def test_rank_0_lists_a_checkpoint_only_once_every_other_machine_has_stored_its_part(s3, tmp_path, caplog):
    """Per-node staging: rank 0 uploads its machine's files at once, and SHA256SUMS (which makes the checkpoint exist in
    the store) only once the other machines' files are there as their `SHA256SUMS.rank-N` say; a stale or wrong
    line does not count, and a part that never comes leaves the checkpoint staged and unlisted."""
    paths = bucket_paths(tmp_path, s3)
    folder = RunFolder(paths.train_dir, paths.train_staging, keep_checkpoints=2, per_node=True)
    announced = []
    folder.announce_checkpoints(lambda step, location, digest: announced.append((step, location, digest)))
    theirs = {"__1_0.distcp": b"the other stage's weights", "rng-00001.pt": b"rank 1's generators"}
    path, digest = staged_sharded(folder.files.checkpoints, 3, theirs)
    stored = f"{s3}/train/checkpoints/step-00000003"
    node_sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(theirs.items()))
    folder._send(path, digest)
    deadline = time.monotonic() + 30
    while not storage.exists(f"{stored}/common.pt") and time.monotonic() < deadline:
        time.sleep(0.1)
    storage.write_text(f"{stored}/SHA256SUMS.rank-00001", node_sums.replace(node_sums[:12], "0" * 12, 1))   # stale
    time.sleep(1.5)
    assert storage.exists(f"{stored}/.metadata") and not storage.exists(f"{stored}/SHA256SUMS")
    assert checkpoint.stored_checkpoints(f"{s3}/train/checkpoints") == [] and announced == []
    for name, data in theirs.items():   # the other machine's upload: its files, then its lines
        storage.write_bytes(f"{stored}/{name}", data)
    storage.write_text(f"{stored}/SHA256SUMS.rank-00001", node_sums)
    assert folder._folder_uploads["step-00000003"].result(timeout=30) is True
    assert checkpoint.stored_checkpoints(f"{s3}/train/checkpoints") == ["step-00000003"]
    assert announced == [(3, stored, digest)] and not path.exists()
    whole = checkpoint.download_checkpoint(stored, tmp_path / "copy" / "step-00000003")
    assert sorted(p.name for p in whole.iterdir()) == [".metadata", "SHA256SUMS", "__1_0.distcp", "common.pt",
                                                       "rng-00001.pt"]

    # the other machine died before its part was stored: at the end the checkpoint stays staged, unlisted
    path, digest = staged_sharded(folder.files.checkpoints, 6, theirs)
    folder._send(path, digest)
    with caplog.at_level("INFO", logger="trainer"):
        left = folder.close(timeout_s=2)
    assert folder.left_in_staging() == [f"checkpoints/step-00000006{name}" for name in
                                        (".sha256", "/.metadata", "/SHA256SUMS", "/common.pt")] and left == 4
    assert checkpoint.stored_checkpoints(f"{s3}/train/checkpoints") == ["step-00000003"] and path.is_dir()
    assert "checkpoint step-00000006: 2 file(s) of other nodes are not in" in caplog.text
    assert "it stays in staging and the next start sends it" in caplog.text



def test_a_machine_sends_the_part_an_earlier_start_left_and_drops_saves_cut_short(s3, tmp_path):
    """Per-node staging, another machine's first rank: a part of step 6 that a killed start made visible but did not
    send goes at the next start, its lines last; a save killed before its part was whole is dropped (rank 0 lists
    no checkpoint without every part, and the run writes that step again)."""
    paths = bucket_paths(tmp_path, s3)
    staged = staging_folder(paths.train_staging, paths.train_dir) / "checkpoints"
    part, cut_short = staged / "step-00000006", staged / "step-00000009.partial"
    for folder in (part, cut_short):
        folder.mkdir(parents=True)
        (folder / "rng-00001.pt").write_bytes(b"rank 1's generators")
    lines = hashlib.sha256(b"rank 1's generators").hexdigest() + "  rng-00001.pt\n"
    (part / "SHA256SUMS.rank-00001").write_text(lines)
    node = NodeFolder(paths.train_dir, paths.train_staging)
    node.close(timeout_s=30)
    stored = f"{s3}/train/checkpoints/step-00000006"
    assert storage.read_bytes(f"{stored}/rng-00001.pt") == b"rank 1's generators"
    assert storage.read_text(f"{stored}/SHA256SUMS.rank-00001") == lines
    assert not part.exists() and not cut_short.exists()
    assert checkpoint.stored_checkpoints(f"{s3}/train/checkpoints") == []   # rank 0's SHA256SUMS makes it one

def two_machines(manifest_uri: str, root: Path, s3: str, mlflow_tracking_uri: str, *extra: str) -> list[str]:
    """The run on two "machines": two torchrun agents of one rank each (pipeline stage 0 and 1) meeting at a port
    here, each with a local folder of its own (staging, input cache) as nodes with local disks have.  Returns each
    node's stderr."""
    root.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = [*TINY, *RESUMED, "parallel.pp=2", f"paths.mlflow_tracking_uri={mlflow_tracking_uri}",
                f"paths.train_dir={s3}/train", f"paths.mlflow_artifacts={s3}/mlflow"]
    nodes, logs = [], []
    for node in (0, 1):
        logs.append(open(root / f"node{node}.log", "w"))
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
                   "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}",
                   "-m", "trainer.train", "--manifest", manifest_uri,
                   *[a for o in [*settings, f"paths.local={root}/node{node}"] for a in ("-o", o)], *extra]
        nodes.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=logs[-1]))
    try:
        codes = [node.wait(timeout=600) for node in nodes]
    finally:
        for node, log in zip(nodes, logs):
            node.kill()
            log.close()
    texts = [(root / f"node{node}.log").read_text() for node in (0, 1)]
    assert codes == [0, 0], "\n\n".join(text[-3000:] for text in texts)
    return texts
