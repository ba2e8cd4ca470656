"""Damaged checkpoints, a half-written lineage line, impossible settings and a crash mid-run: each is met
with a fallback or a message that says what to fix, never a raw traceback or a run left RUNNING."""
import mlflow
import pytest
from mlflow.tracking import MlflowClient

from conf import ConfigError
from conftest import tiny_config, tmp_paths
from trainer.checkpoint import CheckpointError, checksum_path, read_checkpoint
from trainer.manifest import file_sha256
from trainer.train import train

STEPS = 6


def _killed_run(manifest_path, tmp_path, name="killed", checkpoint_format="sharded"):
    cfg = tiny_config(f"schedule.steps={STEPS}", "schedule.checkpoint_interval=2", "schedule.eval_interval=0",
                      "schedule.keep_checkpoints=3", f"schedule.checkpoint_format={checkpoint_format}")
    paths = tmp_paths(tmp_path / name)
    assert train(cfg, paths, manifest_path, stop_after=5) is None     # checkpoints at steps 2 and 4
    folder = tmp_path / name / "train" / "checkpoints"
    return cfg, paths, folder


def test_a_truncated_latest_gathered_checkpoint_falls_back_to_the_one_before(manifest_path, tmp_path, caplog):
    cfg, paths, folder = _killed_run(manifest_path, tmp_path, checkpoint_format="gathered")
    latest = folder / "step-00000004.pt"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    checksum_path(latest).unlink()          # no checksum either: torch.load itself must notice
    with caplog.at_level("WARNING", logger="trainer"):
        result = train(cfg, paths, manifest_path, resume=True)
    assert "step-00000004.pt cannot be read" in caplog.text and "trying the checkpoint before it" in caplog.text
    assert "step-00000002.pt at step 2/6" in caplog.text
    assert result["steps"] == STEPS
    read_checkpoint(latest)                 # step 4 was trained again and rewritten whole


def test_a_flipped_byte_is_caught_by_the_checksums(manifest_path, tmp_path, caplog):
    cfg, paths, folder = _killed_run(manifest_path, tmp_path)
    latest = folder / "step-00000004"
    shard = next(latest.glob("*.distcp"))
    whole = shard.read_bytes()
    shard.write_bytes(whole[: len(whole) // 2])   # truncated: SHA256SUMS says so before DCP reads anything
    with pytest.raises(CheckpointError, match=f"{shard.name} is not the file SHA256SUMS records"):
        read_checkpoint(latest)
    data = bytearray(whole)
    data[len(data) // 2] ^= 0xFF             # inside a tensor: DCP alone would load it silently
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="is not the file SHA256SUMS records"):
        read_checkpoint(latest)
    # SHA256SUMS rewritten to match the damaged shard: the sidecar's digest of SHA256SUMS still tells
    sums = latest / "SHA256SUMS"
    sums.write_text("".join(f"{file_sha256(shard)}  {shard.name}\n" if line.endswith(f"  {shard.name}") else line + "\n"
                            for line in sums.read_text().splitlines()))
    with pytest.raises(CheckpointError, match="SHA256SUMS is not the one its step-00000004.sha256 records"):
        read_checkpoint(latest)
    with caplog.at_level("WARNING", logger="trainer"):
        assert train(cfg, paths, manifest_path, resume=True)["steps"] == STEPS
    assert "the checkpoint is damaged" in caplog.text and "step-00000002 at step 2/6" in caplog.text
    read_checkpoint(latest)   # step 4 was trained again and rewritten whole


def test_no_readable_checkpoint_is_a_clear_error(manifest_path, tmp_path):
    cfg, paths, folder = _killed_run(manifest_path, tmp_path)
    for checkpoint in (p for p in folder.glob("step-*") if p.is_dir()):
        (checkpoint / "common.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="no checkpoint of this run can be read"):
        train(cfg, paths, manifest_path, resume=True)


def test_a_half_written_lineage_line_does_not_stop_the_resume(manifest_path, tmp_path, caplog):
    cfg, paths, _ = _killed_run(manifest_path, tmp_path)
    lineage = tmp_path / "killed" / "train" / "lineage" / "batches.jsonl"
    lineage.write_text(lineage.read_text() + '{"step": 5, "samples": [{"index": 8')   # killed mid-write
    with caplog.at_level("WARNING"):
        result = train(cfg, paths, manifest_path, resume=True)
    assert result["steps"] == STEPS and "is not a whole step record" in caplog.text
    steps = [line for line in lineage.read_text().splitlines()]
    assert len(steps) == STEPS and all(line.endswith("}") for line in steps)


@pytest.mark.parametrize("override,message", [
    ("model.seq_length=0", "model.seq_length must be a positive integer, got 0"),
    ("model.seq_length=-8", "model.seq_length must be a positive integer, got -8"),
    ("batch.global_batch_size=0", "batch.global_batch_size must be a positive integer"),
    ("model.attention=flash3", "model.attention must be sdpa or unfused"),
    ("model.hidden_sise=64", r"unknown setting\(s\) \['hidden_sise'\]"),
])
def test_impossible_settings_stop_before_training(override, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(override)


def test_a_crash_mid_run_marks_the_mlflow_run_failed(manifest_path, tmp_path, monkeypatch):
    from trainer import engine as engine_module
    cfg = tiny_config("schedule.steps=5", "schedule.eval_interval=0")
    paths = tmp_paths(tmp_path / "crash")
    calls = {"n": 0}
    original = engine_module.CpuEngine.step

    def failing_step(self, batches, check):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated device failure")
        return original(self, batches, check)

    monkeypatch.setattr(engine_module.CpuEngine, "step", failing_step)
    with pytest.raises(RuntimeError, match="simulated device failure"):
        train(cfg, paths, manifest_path)
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    client = MlflowClient()
    run = client.search_runs([client.get_experiment_by_name(cfg.experiment).experiment_id])[0]
    assert run.info.status == "FAILED"
    lineage = (tmp_path / "crash" / "train" / "lineage" / "batches.jsonl").read_text().splitlines()
    assert len(lineage) == 2           # the two finished steps, each whole


def test_a_sequence_beyond_the_device_memory_stops_before_training(manifest_path, tmp_path):
    cfg = tiny_config("model.seq_length=50000", "schedule.steps=5", "schedule.eval_interval=0")
    paths = tmp_paths(tmp_path / "long")
    with pytest.raises(ConfigError, match=r"needs about [\d,.]+ GiB per device .* lower model.seq_length \(50000\)"):
        train(cfg, paths, manifest_path)
    assert not (tmp_path / "long" / "train" / "checkpoints").exists() or \
        not list((tmp_path / "long" / "train" / "checkpoints").iterdir())
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    experiment = MlflowClient().get_experiment_by_name(cfg.experiment)
    assert experiment is None or not MlflowClient().search_runs([experiment.experiment_id])   # no run started


def test_the_memory_estimate_grows_with_the_sequence_and_can_be_switched_off():
    from trainer.fit import check_fits, run_estimate
    short, long = (run_estimate(tiny_config(f"model.seq_length={s}"), 4096) for s in (1024, 4096))
    assert long["activations"] == pytest.approx(4 * short["activations"])   # SDPA: linear in s
    assert long["attention_mask"] == pytest.approx(16 * short["attention_mask"])   # the document mask: s x s
    assert long["weights"] == short["weights"] > 0
    assert check_fits(tiny_config("model.seq_length=50000", "limits.memory_fraction=0"), 4096)["total"] > 100 * 2 ** 30
