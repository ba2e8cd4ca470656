"""Poisoned batches: a NaN step updates nothing; repeated bad steps roll back and leave their batches out."""
import json
import math

import pytest
import torch

from conftest import tiny_config, tmp_paths
from trainer import loader as loader_module
from trainer.checkpoint import read_checkpoint, whole_state
from trainer.config import StabilityConfig
from trainer.stability import SpikeGuard, batch_index
from trainer.train import TrainingUnstable, train


def poison(monkeypatch, bad_batches: set[int]):
    """Global batches whose loss mask is NaN: their loss and every gradient become NaN."""
    original = loader_module.micro_batches

    def poisoned(cfg, datasets, batch, dp_rank, dp):
        batches, samples = original(cfg, datasets, batch, dp_rank, dp)
        if batch in bad_batches:
            for b in batches:
                b.loss_mask[:] = float("nan")
        return batches, samples
    monkeypatch.setattr(loader_module, "micro_batches", poisoned)


def lineage_batches(root) -> dict[int, list[int]]:
    lines = (root / "train" / "lineage" / "batches.jsonl").read_text().splitlines()
    return {r["step"]: [s["index"] for s in r["samples"]] for r in map(json.loads, lines)}


def test_a_poisoned_batch_updates_nothing_and_the_run_goes_on(manifest_path, tmp_path, monkeypatch, caplog):
    cfg = tiny_config("schedule.steps=8", "schedule.eval_interval=0", "schedule.checkpoint_interval=4")
    poison(monkeypatch, {5})
    with caplog.at_level("WARNING", logger="trainer"):
        result = train(cfg, tmp_paths(tmp_path), manifest_path)
    assert "step 6 updated nothing: loss is nan" in caplog.text
    assert result["steps"] == 8 and math.isfinite(result["last_loss"])
    payload = whole_state(tmp_path / "train" / "checkpoints" / "step-00000008")   # sharded: read back whole
    assert payload["progress"]["skipped_steps"] == 1 and payload["progress"]["rollbacks"] == 0
    assert all(torch.isfinite(t).all() for t in payload["model"].values() if torch.is_tensor(t))


def test_repeated_bad_steps_roll_back_and_leave_the_batches_out(manifest_path, tmp_path, monkeypatch, caplog):
    cfg = tiny_config("schedule.steps=10", "schedule.eval_interval=0", "schedule.checkpoint_interval=3",
                      "stability.rollback_after=2")
    poison(monkeypatch, {4, 5})               # steps 5 and 6 of the first pass
    with caplog.at_level("WARNING", logger="trainer"):
        result = train(cfg, tmp_paths(tmp_path), manifest_path)
    assert "rolled back to" in caplog.text and "step-00000003 (step 3)" in caplog.text
    assert "batches [4, 5] are left out from now on" in caplog.text
    assert result["steps"] == 10 and math.isfinite(result["last_loss"])
    progress = read_checkpoint(tmp_path / "train" / "checkpoints" / "step-00000010")["progress"]
    assert progress["rollbacks"] == 1 and progress["skip_batches"] == [4, 5] and progress["skipped_steps"] == 2
    # The lineage holds each step once; steps 4 and 5 trained on batches 6 and 7 after the rollback.
    seen = lineage_batches(tmp_path)
    assert sorted(seen) == list(range(10))
    g = cfg.batch.global_batch_size
    assert seen[3] == list(range(3 * g, 4 * g))
    assert seen[4] == list(range(6 * g, 7 * g)) and seen[9] == list(range(11 * g, 12 * g))


def test_bad_steps_with_no_checkpoint_to_return_to_stop_the_run(manifest_path, tmp_path, monkeypatch):
    cfg = tiny_config("schedule.steps=10", "schedule.eval_interval=0", "schedule.checkpoint_interval=8",
                      "stability.rollback_after=2")
    poison(monkeypatch, {1, 2})
    with pytest.raises(TrainingUnstable, match="no checkpoint to return to"):
        train(cfg, tmp_paths(tmp_path), manifest_path)


def test_spike_guard_rules():
    guard = SpikeGuard(StabilityConfig(max_grad_norm=50.0, spike_sigma=6.0, window=10, min_history=5,
                                       rollback_after=2, max_rollbacks=1))
    assert guard.check(float("nan"), 1.0) == "loss is nan"
    assert guard.check(1.0, float("inf")) == "gradient norm is inf"
    assert "above stability.max_grad_norm" in guard.check(1.0, 60.0)
    for norm in (1.0, 1.1, 0.9, 1.05, 0.95):
        assert guard.check(2.0, norm) is None
        guard.record(norm, skipped=False)
    assert guard.check(2.0, 1.2) is None                       # within 6 sigma
    assert "is a spike" in guard.check(2.0, 5.0)              # far outside
    guard.record(5.0, skipped=True)
    assert not guard.must_roll_back
    guard.record(5.0, skipped=True)
    assert guard.must_roll_back
    guard.record(1.0, skipped=False)
    assert guard.consecutive == 0


def test_batch_index_skips_left_out_batches():
    assert [batch_index(s, []) for s in range(4)] == [0, 1, 2, 3]
    assert [batch_index(s, [1, 2]) for s in range(4)] == [0, 3, 4, 5]
    assert [batch_index(s, [5]) for s in range(7)] == [0, 1, 2, 3, 4, 6, 7]
