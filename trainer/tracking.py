"""MLflow for a training run (SEAMS §5): params, per-step metrics, the manifest as dataset input, artifacts.

The tracking store is a local sqlite file; the experiment's artifacts may be on object storage
(`paths.mlflow_artifacts` = s3://…), which MLflow reaches with boto3 at the endpoint of conf/storage.yaml.

MLflow itself is imported where it is used, by rank 0 alone: the import costs seconds of CPU (7 s here) that the
other ranks of a run need not pay.
"""
from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conf import as_dict, flatten
from conf.paths import Paths, is_uri
from storage.config import load_storage_config
from trainer.config import TrainerConfig
from trainer.manifest import Manifest

if TYPE_CHECKING:   # the annotations' name only
    import mlflow

DIGEST_CHARS = 36   # the longest dataset digest MLflow's stores accept

log = logging.getLogger("trainer.tracking")


_ENABLED = True   # False on every rank but 0: one rank logs (trainer/train.py sets it)


def enable(on: bool) -> None:
    global _ENABLED
    _ENABLED = on


def configure(paths: Paths) -> None:
    """Point MLflow at the sqlite store from paths, creating its folder, and at the configured S3 and GCS endpoints."""
    import mlflow
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")   # offline: no usage pings
    cfg = load_storage_config()
    s3 = cfg.s3
    if s3.endpoint_url:   # MLflow's boto3 client reads these; the one place they are configured is conf/storage.yaml
        os.environ["MLFLOW_S3_ENDPOINT_URL"] = s3.endpoint_url
        if s3.path_style:
            os.environ["MLFLOW_BOTO_CLIENT_ADDRESSING_STYLE"] = "path"
    if cfg.gcs.endpoint_url:  # MLflow's google-cloud-storage client takes no endpoint but this (anonymous) variable
        os.environ["STORAGE_EMULATOR_HOST"] = cfg.gcs.endpoint_url
    uri = paths.mlflow_tracking_uri
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)


def artifact_location(paths: Paths) -> str:
    """paths.mlflow_artifacts as MLflow spells it: the URI itself, or a local folder as file://."""
    if is_uri(paths.mlflow_artifacts):
        return paths.mlflow_artifacts
    folder = Path(paths.mlflow_artifacts).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder.as_uri()


def experiment_id(name: str, paths: Paths) -> str:
    from mlflow.tracking import MlflowClient
    client = MlflowClient()
    wanted = artifact_location(paths)
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, artifact_location=wanted)
    if found.artifact_location.rstrip("/") != wanted.rstrip("/"):
        log.warning("MLflow experiment %r keeps the artifact location it was created with, %s, not "
                    "paths.mlflow_artifacts=%s; to use the new location, name another experiment "
                    "(-o experiment=NAME)", name, found.artifact_location, wanted)
    return found.experiment_id


def start_run(cfg: TrainerConfig, paths: Paths, manifest: Manifest, model_info: dict[str, Any],
              run_id: str | None) -> mlflow.ActiveRun:
    """A new run with params/tags/dataset input, or (resume) the killed run, continued."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    configure(paths)
    if run_id is not None:
        return mlflow.start_run(run_id=run_id, log_system_metrics=True)
    # System metrics (CPU, memory, disk, network; GPUs where pynvml is installed) every 10 s, beside the run's own.
    run = mlflow.start_run(experiment_id=experiment_id(cfg.experiment, paths), log_system_metrics=True)
    params = flatten(as_dict(cfg)) | {"manifest_sha256": manifest.sha256} | model_info
    mlflow.log_params(params)
    tags = {"tokenizer_sha256": manifest.tokenizer_sha256, "tokenizer_model": manifest.tokenizer_model,
            "manifest_path": manifest.location, "backend": cfg.backend}
    for table, source in manifest.sources.items():
        tags[f"source.{table}.version"] = str(source.get("version"))
        tags[f"source.{table}.path"] = str(source.get("path"))
    mlflow.set_tags(tags)
    # MLflow caps a dataset digest at 36 characters: the digest is the sha256's prefix, the tag the whole.
    source = manifest.location if is_uri(manifest.location) else manifest.path.resolve().as_uri()
    with warnings.catch_warnings():
        # MLflow registers its local artifact source twice (schemes "" and "file"), both type "local": for a file://
        # URI it warns that the source "can be interpreted in multiple ways" and takes either, the same
        warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted in multiple ways")
        resolved = resolve_dataset_source(source)
    dataset = MetaDataset(source=resolved,
                          name=f"shards-{manifest.sha256[:12]}", digest=manifest.sha256[:DIGEST_CHARS])
    mlflow.log_input(dataset, context="training",
                     tags={"manifest_sha256": manifest.sha256, "tokens": str(manifest.total_tokens),
                           "shards": str(len(manifest.shards))})
    return run


def log_checkpoint(run_id: str, step: int, location: str, sha256: str) -> None:
    """Where checkpoint `step` is and its sha256, as a tag: the run names its checkpoints without storing them.
    Called when the checkpoint is visible, from an asynchronous save's worker too (so by run id, not the
    thread's active run)."""
    if _ENABLED:
        from mlflow.tracking import MlflowClient
        MlflowClient().set_tag(run_id, f"checkpoint.step-{step:08d}", f"{location} sha256:{sha256}")


def log_step(metrics: dict[str, float], step: int) -> None:
    if not _ENABLED:
        return
    # Asynchronous: a sqlite write per step would otherwise cost more than a tiny model's step.
    import mlflow
    mlflow.log_metrics(metrics, step=step, synchronous=False)


def flush() -> None:
    """Wait for the asynchronous metric writes: a checkpoint made visible after this has its steps' metrics in MLflow,
    so a kill -9 after it loses none (a resume logs only the steps after the checkpoint)."""
    if _ENABLED:
        import mlflow
        mlflow.flush_async_logging()


def finish(artifacts: list[tuple[Path, str]], status: str = "FINISHED") -> None:
    if not _ENABLED:
        return
    import mlflow
    mlflow.flush_async_logging()
    run = mlflow.active_run()
    for path, folder in artifacts:
        try:
            mlflow.log_artifact(str(path), artifact_path=folder)
        except Exception as exc:  # noqa: BLE001  (the artifact store is down: the run's own files are safe)
            log.error("MLflow could not store artifact %s under %s (%s: %s); the file stays at %s, and resuming "
                      "the run (--resume, same run folder) logs it again", path.name,
                      run.info.artifact_uri if run else "?", type(exc).__name__, exc, path)
    mlflow.end_run(status=status)
