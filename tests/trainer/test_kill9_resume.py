"""kill -9 in the middle of a run, then --resume: the losses are bitwise those of an uninterrupted run."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
STEPS = 12


def command(manifest_path, root: Path, *extra: str) -> list[str]:
    overrides = [*TINY, f"schedule.steps={STEPS}", "schedule.checkpoint_interval=4", "schedule.eval_interval=0",
                 f"paths.local={root}/local", f"paths.mlflow_tracking_uri=sqlite:///{root}/mlflow.db",
                 f"paths.mlflow_artifacts={root}/artifacts", f"paths.train_dir={root}/train"]
    return [sys.executable, "-m", "trainer.train", "--manifest", str(manifest_path),
            *[a for o in overrides for a in ("-o", o)], *extra]


def losses(root: Path) -> dict[int, float]:
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    client = MlflowClient()
    run = client.search_runs([client.get_experiment_by_name("weblm-pretrain").experiment_id])[0]
    return {m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")}


def test_kill_9_mid_run_then_resume_reproduces_the_losses_bitwise(manifest_path, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(command(manifest_path, straight), cwd=ROOT, check=True, capture_output=True, timeout=600)

    process = subprocess.Popen(command(manifest_path, killed), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    checkpoint = killed / "train" / "checkpoints" / "step-00000008.pt"
    deadline = time.monotonic() + 600
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)          # no cleanup of any kind: mid-step, files open
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-run"

    subprocess.run(command(manifest_path, killed, "--resume"), cwd=ROOT, check=True, capture_output=True,
                   timeout=600)
    expected, got = losses(straight), losses(killed)
    assert sorted(got) == list(range(STEPS))
    assert all(got[step] == expected[step] for step in range(STEPS)), (expected, got)   # bitwise, not approx
    result = json.loads((killed / "train" / "result.json").read_text())
    assert result["last_loss"] == json.loads((straight / "train" / "result.json").read_text())["last_loss"]
    lineage = lambda root: (root / "train" / "lineage" / "batches.jsonl").read_text()
    assert lineage(killed) == lineage(straight)
