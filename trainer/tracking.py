"""MLflow for a training run (SEAMS §5): params, per-step metrics, the manifest as dataset input, artifacts."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mlflow
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.tracking import MlflowClient

from conf import as_dict, flatten
from conf.paths import Paths
from trainer.config import TrainerConfig
from trainer.manifest import Manifest

DIGEST_CHARS = 36   # the longest dataset digest MLflow's stores accept


def configure(paths: Paths) -> None:
    """Point MLflow at the sqlite store from paths, creating its folder."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")   # offline: no usage pings
    uri = paths.mlflow_tracking_uri
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)


def experiment_id(name: str, paths: Paths) -> str:
    client = MlflowClient()
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    artifacts = Path(paths.mlflow_artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    return client.create_experiment(name, artifact_location=artifacts.as_uri())


def start_run(cfg: TrainerConfig, paths: Paths, manifest: Manifest, model_info: dict[str, Any],
              run_id: str | None) -> mlflow.ActiveRun:
    """A new run with params/tags/dataset input, or (resume) the killed run, continued."""
    configure(paths)
    if run_id is not None:
        return mlflow.start_run(run_id=run_id)
    run = mlflow.start_run(experiment_id=experiment_id(cfg.experiment, paths))
    params = flatten(as_dict(cfg)) | {"manifest_sha256": manifest.sha256} | model_info
    mlflow.log_params(params)
    tags = {"tokenizer_sha256": manifest.tokenizer_sha256, "manifest_path": str(manifest.path.resolve()),
            "backend": cfg.backend}
    for table, source in manifest.sources.items():
        tags[f"source.{table}.version"] = str(source.get("version"))
        tags[f"source.{table}.path"] = str(source.get("path"))
    mlflow.set_tags(tags)
    # MLflow caps a dataset digest at 36 characters: the digest is the sha256's prefix, the tag the whole.
    dataset = MetaDataset(source=resolve_dataset_source(manifest.path.resolve().as_uri()),
                          name=f"shards-{manifest.sha256[:12]}", digest=manifest.sha256[:DIGEST_CHARS])
    mlflow.log_input(dataset, context="training",
                     tags={"manifest_sha256": manifest.sha256, "tokens": str(manifest.total_tokens),
                           "shards": str(len(manifest.shards))})
    return run


def log_step(metrics: dict[str, float], step: int) -> None:
    # Asynchronous: a sqlite write per step would otherwise cost more than a tiny model's step.
    mlflow.log_metrics(metrics, step=step, synchronous=False)


def finish(artifacts: list[tuple[Path, str]], status: str = "FINISHED") -> None:
    mlflow.flush_async_logging()
    for path, folder in artifacts:
        mlflow.log_artifact(str(path), artifact_path=folder)
    mlflow.end_run(status=status)
