"""Tensor, pipeline and data parallelism on CPUs (gloo, torchrun): the same losses and the same weights as one
process.

megatron-core's own ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding split the model;
megatron's own 1F1B schedule (`get_forward_backward_func`) runs the pipeline stages (the tiny model's four
layers, two per stage, with the tied embedding on the first and last), and its interleaved 1F1B schedule runs
them as two model chunks per stage (parallel.vp=2: stage 0 holds layers 0 and 2, stage 1 layers 1 and 3);
gradients are summed over data-parallel ranks.  Each layout runs once, as the CI's time allows: tp2-dp2 (tensor and
data parallel together), pp2-vp2 (the interleaved pipeline at tp=1), and tp2-pp2 (plain 1F1B over tensor-parallel
stages) as the resharding test's resumed steps 4-6, whose losses are checked step by step.  Every run scores a
multiple-choice task (trainer/downstream.py) at steps 3 and 6, through the pipeline where there is one: the same
scores as one process.  Context
parallelism needs the cuda backend (its attention needs Transformer Engine): the cpu backend refuses it with
that message (test_parallel_dims.py).
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import sentencepiece
import torch
from mlflow.tracking import MlflowClient

from conftest import TINY, mlflow_uri
from shardkit import EOD, build_shards
from trainer.checkpoint import read_checkpoint, whole_state
from trainer.manifest import file_sha256
from trainer.parallel import ParallelDims, ParallelDimsError

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6
TASK = "what_animals_eat"
ANIMALS = {"otter": "fish", "heron": "frogs", "beaver": "bark", "badger": "worms", "falcon": "pigeons"}


@pytest.fixture(scope="module")
def manifest_path(tmp_path_factory) -> Path:
    """conftest's synthetic shards, with a real SentencePiece tokenizer (downstream evaluation encodes its task
    with the manifest's) and the task beside the manifest: 5 examples of 3 choices, 15 sequences."""
    root = tmp_path_factory.mktemp("shards")
    (root / "corpus.txt").write_text("\n".join(f"the {a} eats {f} every day." for a, f in ANIMALS.items()) * 20)
    sentencepiece.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(root / "spm"),
                                             vocab_size=60, model_type="bpe", pad_id=0, unk_id=1, eos_id=EOD,
                                             bos_id=-1, hard_vocab_limit=False, minloglevel=2)
    foods = list(ANIMALS.values())
    with open(root / f"{TASK}.jsonl", "w") as out:
        for a, animal in enumerate(ANIMALS):
            choices = [f"{foods[(a + k) % len(foods)]} every day." for k in (2, 0, 1)]
            out.write(json.dumps({"context": f"the {animal} eats", "choices": choices, "answer": 1}) + "\n")
    return build_shards(root, tokenizer=(str(root / "spm.model"), file_sha256(root / "spm.model")))


def run(manifest_path, root: Path, processes: int, *overrides: str, resume: bool = False) -> None:
    task = Path(manifest_path).parent / f"{TASK}.jsonl"
    settings = [*TINY, "model.num_layers=4", f"schedule.steps={STEPS}", "schedule.checkpoint_interval=3", "schedule.eval_interval=3",
                f"evaluation.tasks=[{task}]", "evaluation.interval=3", "evaluation.batch_size=8",
                f"paths.local={root}/local", f"paths.mlflow_tracking_uri={mlflow_uri(root / 'mlflow.db')}",
                f"paths.mlflow_artifacts={root}/artifacts", f"paths.train_dir={root}/train", *overrides]
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
                if processes > 1 else [sys.executable])
    command = [*launcher, "-m", "trainer.train", "--manifest", str(manifest_path),
               *[a for o in settings for a in ("-o", o)], *(["--resume"] if resume else [])]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def checkpoint(root: Path, step: int = STEPS) -> dict:
    """A checkpoint's whole state, gathered (step-N.pt) or sharded (step-N/, read back whole)."""
    folder = root / "train" / "checkpoints"
    return (whole_state(folder / f"step-{step:08d}") if (folder / f"step-{step:08d}").is_dir()
            else read_checkpoint(folder / f"step-{step:08d}.pt"))


def param(root: Path, name: str) -> str:
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    client = MlflowClient()
    return client.search_runs([client.get_experiment_by_name("weblm-pretrain").experiment_id])[0].data.params[name]


def metric(root: Path, name: str) -> dict[int, float]:
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("weblm-pretrain").experiment_id])
    assert len(runs) == 1                    # one MLflow run, logged by rank 0 alone
    return {m.step: m.value for m in client.get_metric_history(runs[0].info.run_id, name)}


def history(root: Path, name: str) -> dict[int, list[float]]:
    """Every value logged for `name` at each step of the one MLflow run, in the order logged."""
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    client = MlflowClient()
    [logged] = client.search_runs([client.get_experiment_by_name("weblm-pretrain").experiment_id])
    values: dict[int, list[float]] = {}
    for m in sorted(client.get_metric_history(logged.info.run_id, name), key=lambda m: m.timestamp):
        values.setdefault(m.step, []).append(m.value)
    return values


@pytest.fixture(scope="module")
def single(manifest_path, tmp_path_factory) -> Path:
    """One process, sharded checkpoints (the default, which the parallel runs write too; the gathered format at tp=2:
    tests/trainer/test_kill9_resume.py)."""
    root = tmp_path_factory.mktemp("single")
    run(manifest_path, root, 1, "schedule.checkpoint_format=sharded")
    return root


@pytest.mark.parametrize("processes,layout", [(4, ["parallel.tp=2", "parallel.dp=2"]),
                                              (2, ["parallel.pp=2", "parallel.vp=2", "schedule.checkpoint_format=gathered"])],
                         ids=["tp2-dp2", "pp2-vp2-gathered"])
def test_parallel_run_matches_the_single_process(manifest_path, tmp_path, single, processes, layout):
    run(manifest_path, tmp_path, processes, *layout)
    assert param(tmp_path, "model.parameters") == param(single, "model.parameters")   # the whole model's size
    # the N of the MFU formula: the whole model's, not this rank's shard of it
    assert param(tmp_path, "model.non_embedding_parameters") == param(single, "model.non_embedding_parameters")
    # losses within 1e-5 (the bar); the gradient norm, a sum of squares over differently split and
    # summed shards, within 1e-4
    for name, tolerance in (("loss", 1e-5), ("grad_norm", 1e-4)):
        expected, got = metric(single, name), metric(tmp_path, name)
        assert sorted(got) == list(range(STEPS))
        for step in range(STEPS):
            assert got[step] == pytest.approx(expected[step], rel=tolerance, abs=tolerance), (name, step)
    val_expected, val_got = metric(single, "val_loss"), metric(tmp_path, "val_loss")
    assert val_got.keys() == val_expected.keys() and all(
        val_got[s] == pytest.approx(val_expected[s], rel=1e-5) for s in val_got)
    for name in ("answer_loglik", "acc", "acc_norm"):   # scored through the pipeline's last stage where pp > 1
        expected, got = metric(single, f"downstream.{TASK}.{name}"), metric(tmp_path, f"downstream.{TASK}.{name}")
        assert sorted(got) == [2, 5] and all(got[s] == pytest.approx(expected[s], rel=1e-5) for s in got), name
    # rank 0's checkpoint holds the whole model, gathered over tensor-parallel ranks and pipeline stages (layers
    # numbered globally, the tied embedding once): equal to one process's
    mine, theirs = checkpoint(tmp_path)["model"], checkpoint(single)["model"]
    tensors = [k for k, v in theirs.items() if torch.is_tensor(v)]
    assert list(mine) == list(theirs) and all(mine[k].shape == theirs[k].shape for k in tensors)
    worst = max(((mine[k] - theirs[k]).norm() / theirs[k].norm().clamp_min(1e-12)).item() for k in tensors)
    assert worst < 1e-4, worst
    mine, theirs = (checkpoint(root)["optimizer"] for root in (tmp_path, single))
    assert [g["params"] for g in mine["param_groups"]] == [g["params"] for g in theirs["param_groups"]]
    moments = [(mine["state"][i][k], theirs["state"][i][k]) for i in theirs["state"] for k in ("exp_avg", "exp_avg_sq")]
    worst = max(((a - b).norm() / b.norm().clamp_min(1e-12)).item() for a, b in moments)
    assert worst < 1e-3, worst   # Adam's moments: squares of gradients summed in another order
    lineage = lambda root: (root / "train" / "lineage" / "batches.jsonl").read_text()
    assert lineage(tmp_path) == lineage(single)        # rank 0 records the whole global batch
    if "schedule.checkpoint_format=gathered" in layout:
        resumes_where_it_left_off(manifest_path, tmp_path, processes, layout)


def resumes_where_it_left_off(manifest_path, root: Path, processes: int, layout: list[str]) -> None:
    """The gathered format at pp > 1: rank 0's step-3.pt, read back into each stage's chunks at the same layout,
    continues to the uninterrupted run's losses and step-6 weights and moments, bitwise."""
    folder = root / "train" / "checkpoints"
    uninterrupted = read_checkpoint(folder / f"step-{STEPS:08d}.pt")
    for path in folder.glob(f"step-{STEPS:08d}*"):   # as if killed after step 3's checkpoint
        path.unlink()
    run(manifest_path, root, processes, *layout, resume=True)
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlflow.db")
    client = MlflowClient()
    [logged] = client.search_runs([client.get_experiment_by_name("weblm-pretrain").experiment_id])  # one run, resumed
    losses: dict[int, list[float]] = {}
    for m in client.get_metric_history(logged.info.run_id, "loss"):
        losses.setdefault(m.step, []).append(m.value)
    assert {s: len(v) for s, v in losses.items()} == {0: 1, 1: 1, 2: 1, 3: 2, 4: 2, 5: 2}   # steps 4-6 twice
    assert all(v[0] == v[1] for v in losses.values() if len(v) == 2), losses
    resumed = read_checkpoint(folder / f"step-{STEPS:08d}.pt")
    assert list(resumed["model"]) == list(uninterrupted["model"]) and all(
        torch.equal(v, uninterrupted["model"][k]) for k, v in resumed["model"].items() if torch.is_tensor(v))
    assert all(torch.equal(v, uninterrupted["optimizer"]["state"][i][k])
               for i, state in resumed["optimizer"]["state"].items() for k, v in state.items())


def test_a_virtual_pipeline_that_cannot_interleave_is_refused():
    with pytest.raises(ParallelDimsError, match="set parallel.pp > 1 or parallel.vp=1"):
        ParallelDims(tp=1, pp=1, cp=1, dp=2, world_size=2, vp=2)
    with pytest.raises(ParallelDimsError, match="model.num_layers=6 does not split evenly over parallel.pp=2 "
                                                "pipeline stages x parallel.vp=2 chunks"):
        ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2, vp=2).require_model_split(6)
    with pytest.raises(ParallelDimsError, match=r"micro_batch_size\*dp\) = 3, to be a multiple of parallel.pp=2"):
        ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2, vp=2).require_interleavable(3)
    ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2, vp=2).require_interleavable(4)
    ParallelDims(tp=1, pp=2, cp=1, dp=1, world_size=2).require_interleavable(3)   # plain 1F1B takes any number


def test_sharded_checkpoints_reshard_between_one_process_and_tensor_x_pipeline_parallel(tmp_path, single,
                                                                                        manifest_path):
    shutil.copytree(single, tmp_path, dirs_exist_ok=True)
    folder = tmp_path / "train" / "checkpoints"
    shutil.rmtree(folder / f"step-{STEPS:08d}")   # as if killed after step 3
    # one process's shards read as tensor-parallel slices of two stages (model, AdamW moments, RNG, data position);
    # steps 4-6 land where one process lands, each saved by the 4 ranks as their own shards
    run(manifest_path, tmp_path, 4, "parallel.tp=2", "parallel.pp=2", "schedule.checkpoint_format=sharded",
        "schedule.checkpoint_interval=1", resume=True)
    result = lambda root: json.loads((root / "train" / "result.json").read_text())
    assert result(tmp_path)["last_loss"] == pytest.approx(result(single)["last_loss"], rel=1e-5)
    # megatron's 1F1B schedule over tensor-parallel stages: steps 4-6, logged into the copied run beside one
    # process's own, have one process's losses and gradient norms, and step 6 its validation loss and task scores
    for name, tolerance in (("loss", 1e-5), ("grad_norm", 1e-4), ("val_loss", 1e-5),
                            *((f"downstream.{TASK}.{score}", 1e-5) for score in ("answer_loglik", "acc", "acc_norm"))):
        logged = history(tmp_path, name)
        again = {step: values for step, values in logged.items() if len(values) == 2}
        assert sorted(again) == ([3, 4, 5] if name in ("loss", "grad_norm") else [5]), (name, logged)
        assert all(values[1] == pytest.approx(values[0], rel=tolerance, abs=tolerance) for values in again.values()), \
            (name, again)
    assert sorted(p.name for p in folder.iterdir()) == ["step-00000005", "step-00000005.sha256", "step-00000006",
                                                         "step-00000006.sha256"]   # the newest 2 kept
    assert len(list((folder / "step-00000006").glob("__*_0.distcp"))) == 4 and \
        len(list((folder / "step-00000006").glob("rng-*.pt"))) == 4     # each rank wrote its own shards and RNG
    theirs = checkpoint(single)["model"]
    tensors = [k for k, v in theirs.items() if torch.is_tensor(v)]
    worst = max(((checkpoint(tmp_path)["model"][k] - theirs[k]).norm() / theirs[k].norm().clamp_min(1e-12)).item()
                for k in tensors)
    assert worst < 1e-4, worst
    # and back: tp=2 x pp=2's step-5 shards resume in one process, whose step 6 is one process's step 6
    shutil.rmtree(folder / f"step-{STEPS:08d}")
    run(manifest_path, tmp_path, 1, "schedule.checkpoint_format=sharded", "schedule.checkpoint_interval=1",
        resume=True)
    assert result(tmp_path)["last_loss"] == pytest.approx(result(single)["last_loss"], rel=1e-5)
    worst = max(((checkpoint(tmp_path)["model"][k] - theirs[k]).norm() / theirs[k].norm().clamp_min(1e-12)).item()
                for k in tensors)
    assert worst < 1e-4, worst
