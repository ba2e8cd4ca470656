"""A killed run resumed from its last checkpoint continues exactly where an uninterrupted run goes."""
import json
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from conftest import tiny_config, tmp_paths
from trainer import checkpoint
from trainer.checkpoint import CheckpointError, list_checkpoints
from trainer.train import train

STEPS = 10


def losses(paths, run_id):
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    return {m.step: m.value for m in MlflowClient().get_metric_history(run_id, "loss")}


def test_resumed_run_matches_an_uninterrupted_one(manifest_path, tmp_path, caplog, monkeypatch):
    settings = (f"schedule.steps={STEPS}", "schedule.checkpoint_interval=3", "schedule.eval_interval=0")
    straight_paths, killed_paths = tmp_paths(tmp_path / "straight"), tmp_paths(tmp_path / "killed")
    straight = train(tiny_config(*settings, "schedule.checkpoint_format=gathered"), straight_paths, manifest_path)

    # The killed run writes sharded checkpoints asynchronously.  Killed after step 7 while step 6's save was still
    # being written (its folder never published): the latest checkpoint is step 3, and steps 4-7 are redone.
    cfg = tiny_config(*settings, "schedule.checkpoint_format=sharded", "schedule.checkpoint_async=true")
    publish = checkpoint._publish
    monkeypatch.setattr(checkpoint, "_publish", lambda staged, target, keep, *told: None
                        if target.name == "step-00000006" else publish(staged, target, keep, *told))
    assert train(cfg, killed_paths, manifest_path, stop_after=7) is None
    monkeypatch.undo()
    folder = Path(killed_paths.train_dir) / "checkpoints"
    assert [p.name for p in list_checkpoints(folder)] == ["step-00000003"]
    assert (folder / "step-00000006.partial" / checkpoint.COMMON).exists()   # written, never made visible
    # the asynchronous save's MLflow tag names its real digest once it became visible (none for step 6)
    mlflow.set_tracking_uri(killed_paths.mlflow_tracking_uri)
    (killed_run,) = MlflowClient().search_runs([MlflowClient().get_experiment_by_name(cfg.experiment).experiment_id])
    tags = {k: v for k, v in killed_run.data.tags.items() if k.startswith("checkpoint.")}
    assert tags == {"checkpoint.step-00000003": f"{folder / 'step-00000003'} sha256:"
                                                f"{checkpoint.checkpoint_sha256(folder / 'step-00000003')}"}
    with pytest.raises(CheckpointError, match="pass --resume to continue it"):
        train(cfg, killed_paths, manifest_path)
    with pytest.raises(CheckpointError, match=r"settings changed since the checkpoint: optim.lr 0.003 -> 0.001"):
        train(tiny_config(*settings, "schedule.checkpoint_format=sharded", "optim.lr=0.001"), killed_paths,
              manifest_path, resume=True)
    with caplog.at_level("WARNING", logger="trainer"):   # how checkpoints are written may change on a resume
        resumed = train(tiny_config(*settings, "schedule.checkpoint_format=sharded", "schedule.checkpoint_async=false"),
                        killed_paths, manifest_path, resume=True)
    assert "resuming from" in caplog.text and "step-00000003 at step 3/10" in caplog.text
    assert not (folder / "step-00000006.partial").exists()   # the next save of step 6 replaced it

    killed_run = next(iter(MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name(cfg.experiment).experiment_id])))
    assert resumed["run_id"] == killed_run.info.run_id != straight["run_id"]   # the killed MLflow run, continued
    assert resumed["first_loss"] == straight["first_loss"]
    assert resumed["last_loss"] == pytest.approx(straight["last_loss"], abs=1e-5)
    expected, got = losses(straight_paths, straight["run_id"]), losses(killed_paths, resumed["run_id"])
    for step in range(6, STEPS):
        assert got[step] == pytest.approx(expected[step], abs=1e-5), step
    read = lambda p: (p.parent.parent / "train" / "lineage" / "batches.jsonl").read_text().splitlines()
    straight_lineage = [json.loads(x) for x in read(tmp_path / "straight" / "mlflow" / "x")]
    resumed_lineage = [json.loads(x) for x in read(tmp_path / "killed" / "mlflow" / "x")]
    assert resumed_lineage == straight_lineage   # same batches, each step recorded once

    # Resuming a finished run trains nothing more and names the same final checkpoint (in the other format too).
    again = train(tiny_config(*settings, "schedule.checkpoint_format=gathered"), killed_paths, manifest_path,
                  resume=True)
    assert again["steps"] == STEPS and again["checkpoint"] == resumed["checkpoint"]
    assert again["last_loss"] == resumed["last_loss"]

    # A damaged shard of the latest checkpoint: SHA256SUMS finds it, the resume falls back to the one before it.
    shard = next((folder / f"step-{STEPS:08d}").glob("__0_0.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    caplog.clear()
    with caplog.at_level("WARNING", logger="trainer"):
        again = train(cfg, killed_paths, manifest_path, resume=True)
    assert "__0_0.distcp is not the file SHA256SUMS records" in caplog.text and "step-00000009 at step 9/10" in caplog.text
    assert again["last_loss"] == resumed["last_loss"]   # step 10 trained again from step 9's shards: bitwise
