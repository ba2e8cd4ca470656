"""Fixtures for the trainer's tests: synthetic shards, tmp paths, a tiny config and one trained run."""
from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))   # shardkit, the shard-building helper beside this file
warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")

from conf.paths import load_paths  # noqa: E402
from shardkit import build_shards  # noqa: E402
from trainer.config import load_trainer_config  # noqa: E402

# A model small enough for two shared CPU cores, a schedule short enough for a test.
TINY = ["lineage.detail=full", "model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4", "model.ffn_hidden_size=256",
        "model.seq_length=64", "batch.micro_batch_size=8", "batch.global_batch_size=16", "data.split=90,10,0",
        "optim.warmup_steps=4", "schedule.log_interval=10", "schedule.eval_interval=20", "schedule.eval_batches=1",
        "schedule.checkpoint_interval=20"]


def tiny_config(*overrides: str):
    return load_trainer_config([*TINY, *overrides])


_MLFLOW_TEMPLATE: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _mlflow_template(tmp_path_factory):
    """An empty MLflow sqlite store, made by MLflow once per session for `mlflow_uri` to copy."""
    from mlflow.tracking import MlflowClient

    template = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{template}").search_experiments()
    _MLFLOW_TEMPLATE.append(template)
    yield
    _MLFLOW_TEMPLATE.clear()


def mlflow_uri(db: Path) -> str:
    """The sqlite URI of an MLflow store at `db`: a copy of the session's empty store unless one is there already
    (a resumed run's).  MLflow makes a new store by running its schema migrations, 3-6 s of every run's start."""
    if not db.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_MLFLOW_TEMPLATE[0], db)
    return f"sqlite:///{db}"


def tmp_paths(root: Path):
    return load_paths([f"local={root}/local", f"mlflow_tracking_uri={mlflow_uri(root / 'mlflow' / 'mlflow.db')}",
                       f"mlflow_artifacts={root}/mlflow/artifacts", f"train_dir={root}/train",
                       f"shards_dir={root}/shards"])


@pytest.fixture(scope="session")
def manifest_path(tmp_path_factory) -> Path:
    return build_shards(tmp_path_factory.mktemp("shards"), n_shards=2, docs_per_shard=60)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, manifest_path):
    """One 40-step run of the tiny model, shared by the tests that inspect a finished run."""
    from trainer.train import train
    root = tmp_path_factory.mktemp("run")
    cfg, paths = tiny_config("schedule.steps=40"), tmp_paths(root)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        result = train(cfg, paths, manifest_path, Path(paths.train_dir))
    return {"result": result, "cfg": cfg, "paths": paths, "out": Path(paths.train_dir), "manifest": manifest_path,
            "warnings": [str(w.message) for w in warned]}


def pytest_configure(config):
    # megatron 0.16.1 on numpy 2 / without TE warns on every sample and layer; the tests assert behaviour instead.
    for line in ("ignore::DeprecationWarning:megatron", "ignore::UserWarning:megatron",
                 "ignore::DeprecationWarning:torch"):
        config.addinivalue_line("filterwarnings", line)
