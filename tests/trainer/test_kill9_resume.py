"""kill -9 in the middle of a run, then --resume: the losses are bitwise those of an uninterrupted run, for one
process (gathered checkpoints) and for a tensor-parallel torchrun run (sharded checkpoints written asynchronously,
resumed into the gathered format).  Data-parallel sharded checkpoints: tests/trainer/test_cpu_parallel.py."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import psutil
from mlflow.tracking import MlflowClient

import torch

from conftest import TINY, mlflow_uri
from trainer.checkpoint import read_checkpoint, whole_state

ROOT = Path(__file__).resolve().parents[2]
STEPS = 12


def command(manifest_path, root: Path, *extra: str, settings: tuple[str, ...] = (), processes: int = 1) -> list[str]:
    overrides = [*TINY, f"schedule.steps={STEPS}", "schedule.checkpoint_interval=4", "schedule.eval_interval=0",
                 f"paths.local={root}/local", f"paths.mlflow_tracking_uri={mlflow_uri(root / 'mlflow.db')}",
                 f"paths.mlflow_artifacts={root}/artifacts", f"paths.train_dir={root}/train", *settings]
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
                if processes > 1 else [sys.executable])
    return [*launcher, "-m", "trainer.train", "--manifest", str(manifest_path),
            *[a for o in overrides for a in ("-o", o)], *extra]


def losses(root: Path) -> dict[int, float]:
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    client = MlflowClient()
    run = client.search_runs([client.get_experiment_by_name("weblm-pretrain").experiment_id])[0]
    return {m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")}


def killed_and_uninterrupted(command_line: list[str], root: Path, checkpoint: str, *on_resume: str) -> None:
    """Two copies of the run side by side: `root/killed`, killed once `checkpoint` is visible and then resumed (with
    the overrides `on_resume`), and `root/straight`, left alone."""
    straight, killed = root / "straight", root / "killed"
    straight.mkdir(parents=True)
    mlflow_uri(straight / "mlflow.db")
    with open(straight / "stderr.txt", "w") as stderr:
        uninterrupted = subprocess.Popen([a.replace(str(killed), str(straight)) for a in command_line], cwd=ROOT,
                                         stdout=subprocess.DEVNULL, stderr=stderr)
        kill_9(command_line, killed, checkpoint)
        assert uninterrupted.wait(timeout=600) == 0, (straight / "stderr.txt").read_text()[-3000:]
    subprocess.run([*command_line, *[a for o in on_resume for a in ("-o", o)], "--resume"], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)


def kill_9(command_line: list[str], killed: Path, checkpoint: str) -> None:
    """Start the run, SIGKILL it once `checkpoint` is visible: torchrun and every rank at once, as when a machine
    dies.  torchrun starts each rank in a session of its own, so killing torchrun's process group would leave the
    ranks running on to the end: every process of the tree is killed."""
    process = subprocess.Popen(command_line, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    visible = killed / "train" / "checkpoints" / checkpoint
    deadline = time.monotonic() + 600
    while not visible.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    for member in tree:
        member.kill()                                # no cleanup of any kind: mid-step, files open
    process.wait()
    psutil.wait_procs(tree, timeout=30)
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-run"
    assert not (killed / "train" / "checkpoints" / f"step-{STEPS:08d}").exists(), "killed after its last step"


def test_kill_9_mid_run_then_resume_reproduces_the_losses_bitwise(manifest_path, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    killed_and_uninterrupted(command(manifest_path, killed, settings=("schedule.checkpoint_format=gathered",)),
                             tmp_path, "step-00000008.pt")
    expected, got = losses(straight), losses(killed)
    assert sorted(got) == list(range(STEPS))
    assert all(got[step] == expected[step] for step in range(STEPS)), (expected, got)   # bitwise, not approx
    result = json.loads((killed / "train" / "result.json").read_text())
    assert result["last_loss"] == json.loads((straight / "train" / "result.json").read_text())["last_loss"]
    lineage = lambda root: (root / "train" / "lineage" / "batches.jsonl").read_text()
    assert lineage(killed) == lineage(straight)


def test_a_tensor_parallel_run_killed_after_an_async_sharded_save_resumes_bitwise(manifest_path, tmp_path):
    """tp=2 on torchrun, sharded checkpoints written asynchronously, killed once the step-4 checkpoint is visible
    (step 8's save may be in flight: it waits for step 4's), resumed writing the gathered format (gathered over the
    tensor-parallel ranks).  An asynchronous save lands late: killed after step 8's, the run would be all but over."""
    settings = ("parallel.tp=2", "schedule.checkpoint_format=sharded", "schedule.checkpoint_async=true")
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    killed_and_uninterrupted(command(manifest_path, killed, settings=settings, processes=2), tmp_path, "step-00000004",
                             "schedule.checkpoint_format=gathered")
    expected, got = losses(straight), losses(killed)
    assert sorted(got) == list(range(STEPS))
    assert all(got[step] == expected[step] for step in range(STEPS)), (expected, got)   # bitwise, not approx
    lineage = lambda root: (root / "train" / "lineage" / "batches.jsonl").read_text()
    assert lineage(killed) == lineage(straight)
    # the same final weights and moments, whole, in either format
    mine = read_checkpoint(killed / "train" / "checkpoints" / f"step-{STEPS:08d}.pt")
    theirs = whole_state(straight / "train" / "checkpoints" / f"step-{STEPS:08d}")
    assert list(mine["model"]) == list(theirs["model"])
    assert all(torch.equal(mine["model"][k], theirs["model"][k]) for k in theirs["model"]
               if torch.is_tensor(theirs["model"][k]))
    assert all(torch.equal(mine["optimizer"]["state"][i][m], theirs["optimizer"]["state"][i][m])
               for i in theirs["optimizer"]["state"] for m in ("exp_avg", "exp_avg_sq"))
