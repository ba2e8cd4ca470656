"""Train megatron-core's GPTModel on the shards of a manifest (SEAMS §4) and report per SEAMS §5.

    python -m trainer.train [--manifest PATH|URI] [--out DIR|URI] [--resume] [-o key=value ...]

`-o` overrides `conf/trainer.yaml` (e.g. `-o schedule.steps=50`); keys starting with `paths.`
override `conf/paths.yaml` (e.g. `-o paths.mlflow_tracking_uri=sqlite:////tmp/m.db`).
Shards and the run folder may be on object storage (s3://, gs://): shards are staged into
`paths.cache_dir` (trainer/input_cache.py), checkpoints are written to `paths.train_staging` and
uploaded in the background (trainer/run_folder.py).
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conf import ConfigError, as_dict, flatten, split_paths_overrides
from conf.paths import Paths, join, load_paths
from trainer import tracking
from trainer.backend import open_backend
from trainer.checkpoint import CheckpointError, RNGState, checksum_path, local_rank, read_checkpoint, restore
from trainer.config import TrainerConfig, load_trainer_config
from trainer.data import build_datasets, eval_batches, stage_plan
from trainer.downstream import Downstream, sentencepiece_encoder
from trainer.engine import build_engine
from trainer.input_cache import open_manifest
from trainer.lineage import LineageWriter, NoLineage
from trainer.manifest import Manifest, ManifestError
from trainer.loader import StepLoader, to_device
from trainer.fit import check_fits
from trainer.flops import bf16_peak, flops_per_token, mfu
from trainer.model import count_parameters, padded_vocab_size, transformer_parameters
from trainer.progress import Meter, Progress
from trainer.stability import SpikeGuard, batch_index, insert_sorted
from trainer.node_folders import FollowerFolder, NodeFolder
from trainer.run_files import node_staging, staging_per_machine
from trainer.run_folder import RunFolder

log = logging.getLogger("trainer")


class TrainingUnstable(RuntimeError):
    """Steps keep updating nothing and a rollback cannot or may no longer help."""

# Settings that may change between a killed run and its resume; every other one shapes the trajectory.
RESUMABLE_CHANGES = ("schedule.log_interval", "schedule.checkpoint_interval", "schedule.keep_checkpoints",
                     "schedule.eval_interval", "schedule.eval_batches", "experiment", "remote.download_attempts",
                     "remote.drain_timeout_s", "schedule.checkpoint_format", "schedule.checkpoint_async",
                     # checkpoints hold whole (unsharded) state and batches do not depend on dp: a run may
                     # resume at another tensor/pipeline/data-parallel layout
                     "parallel.tp", "parallel.pp", "parallel.vp", "parallel.dp", "data.prefetch",
                     # downstream tasks only read the model
                     "evaluation.tasks", "evaluation.interval", "evaluation.max_examples", "evaluation.batch_size",
                     "lineage.detail")


def train(cfg: TrainerConfig, paths: Paths, manifest_path: str | Path | None = None, out: str | Path | None = None,
          resume: bool = False, stop_after: int | None = None) -> dict[str, Any] | None:
    """Run (or resume) training; returns result.json's content, or None when stopped by `stop_after`."""
    train_dir = str(out or paths.train_dir)
    per_node = node_staging(train_dir, cfg.schedule.checkpoint_format == "sharded", cfg.remote.shared_staging)
    manifest = open_manifest(str(manifest_path or join(paths.shards_dir, "manifest.json")), paths.cache_dir,
                             cfg.remote.download_attempts)
    main = int(os.environ.get("RANK", "0")) == 0   # torchrun's; one process is rank 0
    tracking.enable(main)
    if main:
        folder = RunFolder(train_dir, paths.train_staging, cfg.schedule.keep_checkpoints, per_node,
                           wait_s=cfg.remote.drain_timeout_s)
    elif per_node and local_rank() == 0:   # this machine stages and uploads its own ranks' shards
        folder = NodeFolder(train_dir, paths.train_staging)
    else:
        folder = FollowerFolder(train_dir, paths.train_staging, per_node)
    completed = False
    try:
        result = _train(cfg, paths, manifest, folder, resume, stop_after)
        completed = True
        return result
    finally:   # after a failure, nothing waits: unsent files stay in staging for the next start
        folder.close(cfg.remote.drain_timeout_s if completed else 0.0)


def _train(cfg: TrainerConfig, paths: Paths, manifest: Manifest, folder: RunFolder, resume: bool,
           stop_after: int | None) -> dict[str, Any] | None:
    files = folder.files
    if not resume and folder.checkpoints():
        where = join(folder.home, "checkpoints")
        raise CheckpointError(f"{where} holds checkpoints of an earlier run; pass --resume to continue "
                              "it, or choose another --out")
    with open_backend(cfg) as backend:
        check_fits(cfg, manifest.vocab_size)   # before any allocation: a run that cannot fit stops here
        datasets = build_datasets(cfg, manifest, files.cache(manifest.sha256),
                                  per_machine=staging_per_machine(folder.home, cfg.remote.shared_staging))
        vocab_size = padded_vocab_size(manifest.vocab_size, cfg.model.vocab_multiple, cfg.parallel.tp)
        engine = build_engine(cfg, backend, vocab_size)
        progress = Progress()
        guard = SpikeGuard(cfg.stability)
        state = engine.parts() | {"progress": progress, "rng": RNGState(), "stability": guard}
        if resume:
            _resume(folder, state, cfg, manifest.sha256)
        model_info = {"model.parameters": count_parameters(engine.gpt),   # collective under model parallelism
                      "model.non_embedding_parameters": transformer_parameters(engine.gpt),
                      "model.padded_vocab_size": vocab_size}
        stages = stage_plan(datasets, cfg.batch.global_batch_size)
        if datasets.staged:   # the staged mix's boundaries, as MLflow params (data.stage.<name>.first_step)
            model_info |= {f"data.stage.{s['stage']}.first_step": s["first_step"] for s in stages}
        # shards whose part of a split fills no sample (trainer/data.py): how many, as MLflow params
        model_info |= {f"data.shards_left_out.{split}": len(names) for split, names in datasets.left_out.items()}
        main = backend.rank == 0
        if main:
            run = tracking.start_run(cfg, paths, manifest, model_info, progress.run_id)
            progress.run_id = run.info.run_id
            folder.announce_checkpoints(lambda step, location, digest, run_id=progress.run_id:
                                        tracking.log_checkpoint(run_id, step, location, digest))
        lineage = (LineageWriter(folder.prepare_lineage(progress.step), keep_before=progress.step,
                                 detail=cfg.lineage.detail) if main
                   else NoLineage())
        val_batches = [to_device(b, backend.device) for b in eval_batches(cfg, datasets, manifest.eod_id)]
        downstream = _downstream(cfg, manifest, backend.device)
        meter = Meter(cfg.schedule.steps, progress.step)
        throughput = Throughput(cfg, model_info["model.non_embedding_parameters"])
        tokens_per_step = cfg.batch.global_batch_size * cfg.model.seq_length
        log.info("training %s parameters (vocab %d -> %d) on %d tokens in %d shards, %d steps of %d tokens",
                 f"{model_info['model.parameters']:,}", manifest.vocab_size, vocab_size, manifest.total_tokens,
                 len(manifest.shards), cfg.schedule.steps, tokens_per_step)

        checkpoint = folder.latest_checkpoint()   # what result.json names if no step is left to run
        def loader_from(step: int) -> StepLoader:
            return StepLoader(cfg, datasets, step, cfg.schedule.steps, backend.dp_rank, backend.dims.dp,
                              backend.device, progress.skip_batches)

        try:
            evaluations = Evaluations(val_batches, datasets.source_names, downstream)
            stopped, checkpoint = _loop(cfg, manifest, folder, engine, loader_from, lineage, evaluations, meter,
                                        throughput, progress, state, checkpoint, stop_after)
        except BaseException as exc:
            # The lineage keeps every finished step; MLflow says the run did not finish (KILLED on Ctrl-C/SIGTERM).
            lineage.close()
            status = "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"
            log.error("training stopped at step %d: %s: %s (MLflow run %s marked %s; --resume continues from "
                      "the last checkpoint)", progress.step, type(exc).__name__, exc, progress.run_id, status)
            tracking.finish([], status=status)
            raise
        if stopped:
            return None
        lineage.close()
        result = {"run_id": progress.run_id, "steps": progress.step, "first_loss": progress.first_loss,
                  "last_loss": progress.last_loss, "tokens_seen": progress.tokens_seen,
                  "checkpoint": checkpoint, "lineage": folder.lineage_location,
                  "downstream": progress.downstream, "stages": stages, "shards_left_out": datasets.left_out}
        folder.write_result(result)
        if main:
            tracking.finish([(files.lineage, "lineage"), (files.result, "")])
        rate = meter.steps_per_s(progress.step - 1)
        log.info("done: loss %.4f -> %.4f over %d steps; %.2f steps/s, %s tokens/s wall-clock; result %s",
                 progress.first_loss, progress.last_loss, progress.step, rate, f"{rate * tokens_per_step:,.0f}",
                 folder.location("result.json"))
        return result


@dataclass(frozen=True)
class Evaluations:
    """What a step may evaluate: the fixed validation batches (their labels tagged with the mix sources), and
    the downstream tasks (or None)."""
    val_batches: list
    sources: list[str]
    downstream: Downstream | None


def _downstream(cfg: TrainerConfig, manifest: Manifest, device) -> Downstream | None:
    ev = cfg.evaluation
    if not (ev.tasks and ev.interval):
        return None
    return Downstream(ev.tasks, ev.max_examples, sentencepiece_encoder(manifest.tokenizer_file),
                      cfg.model.seq_length, ev.batch_size, device)


def _loop(cfg: TrainerConfig, manifest: Manifest, folder: RunFolder, engine, loader_from,
          lineage: LineageWriter, evaluations: Evaluations, meter: Meter, throughput: Throughput,
          progress: Progress, state: dict[str, Any], checkpoint: str | None,
          stop_after: int | None) -> tuple[bool, str | None]:
    """The steps left in the run; (stopped by --stop-after, the newest checkpoint).  A rollback restarts
    the data from the checkpoint it returns to, without the batches that caused it."""
    while progress.step < cfg.schedule.steps:
        loader = loader_from(progress.step)
        try:
            outcome, saved = _steps(cfg, manifest, folder, engine, loader, lineage, evaluations, meter, throughput,
                                    progress, state, stop_after)
        finally:
            loader.close()
        if outcome == "rollback":
            _roll_back(cfg, folder, progress, state, lineage)
            continue
        return outcome == "stopped", saved or checkpoint
    return False, checkpoint


def _steps(cfg: TrainerConfig, manifest: Manifest, folder: RunFolder, engine, loader: StepLoader,
           lineage: LineageWriter, evaluations: Evaluations, meter: Meter, throughput: Throughput,
           progress: Progress, state: dict[str, Any], stop_after: int | None) -> tuple[str, str | None]:
    """Run steps from the loader: ("done" | "stopped" (--stop-after) | "rollback" (stability.rollback_after),
    the checkpoint saved last, or None)."""
    saved = None
    tokens_per_step = cfg.batch.global_batch_size * cfg.model.seq_length
    guard: SpikeGuard = state["stability"]
    began = time.perf_counter()
    for step, batches, samples in loader:
        done = engine.step(batches, guard.check)
        guard.record(done.grad_norm, skipped=done.skipped is not None)
        loss = done.loss
        if done.skipped:
            progress.skipped_steps += 1
            log.warning("step %d updated nothing: %s (%d skipped so far, %d in a row)", step + 1, done.skipped,
                        progress.skipped_steps, guard.consecutive)
        progress.step, progress.tokens_seen, progress.last_loss = step + 1, progress.tokens_seen + tokens_per_step, loss
        progress.first_loss = loss if progress.first_loss is None else progress.first_loss
        now = time.perf_counter()
        tokens_per_s, began = tokens_per_step / (now - began), now   # the step, its wait for data included
        lr = engine.lr
        metrics = {"loss": loss, "lr": lr, "grad_norm": done.grad_norm, "tokens_per_s": tokens_per_s,
                   "tokens_seen": progress.tokens_seen, "skipped_steps": progress.skipped_steps,
                   "rollbacks": progress.rollbacks} | throughput.metrics(tokens_per_s)
        lineage.write(step, samples)
        if guard.must_roll_back:
            tracking.log_step({k: v for k, v in metrics.items() if math.isfinite(v)}, step)
            return "rollback", saved
        final = step + 1 == cfg.schedule.steps
        if evaluations.val_batches and (step + 1) % cfg.schedule.eval_interval == 0:
            metrics["val_loss"], by_source = engine.evaluate(evaluations.val_batches, len(evaluations.sources))
            metrics["val_perplexity"] = math.exp(min(metrics["val_loss"], 50.0))
            for name, (loss_sum, tokens) in zip(evaluations.sources, [] if by_source is None else by_source.tolist()):
                if tokens:
                    metrics[f"val_loss.{name}"] = loss_sum / tokens
                    metrics[f"val_perplexity.{name}"] = math.exp(min(loss_sum / tokens, 50.0))
        if evaluations.downstream and ((step + 1) % cfg.evaluation.interval == 0 or final):
            progress.downstream = evaluations.downstream.run(engine.gpt, engine.token_log_probs)
            metrics |= progress.downstream
        tracking.log_step({k: v for k, v in metrics.items() if math.isfinite(v)}, step)
        if (step + 1) % cfg.schedule.log_interval == 0 or step + 1 == cfg.schedule.steps:
            log.info(meter.line(step, loss, lr, metrics["grad_norm"], tokens_per_s)
                     + (f" | val {metrics['val_loss']:.4f}" if "val_loss" in metrics else ""))
        if final or (step + 1) % cfg.schedule.checkpoint_interval == 0:
            tracking.flush()   # the steps this checkpoint covers are in MLflow before it can be resumed from
            saved = folder.save_checkpoint(step + 1, state, _meta(cfg, manifest))
        if stop_after is not None and step + 1 >= stop_after and not final:
            log.warning("stopping after step %d as asked (--stop-after); resume with --resume", step + 1)
            lineage.close()
            tracking.finish([], status="KILLED")
            return "stopped", saved
    return "done", saved


def _roll_back(cfg: TrainerConfig, folder: RunFolder, progress: Progress, state: dict[str, Any],
               lineage: LineageWriter) -> None:
    """Back to the newest readable checkpoint; the batches of the skipped steps are never drawn again."""
    guard: SpikeGuard = state["stability"]
    bad_steps = range(progress.step - guard.consecutive, progress.step)
    bad = [batch_index(s, progress.skip_batches) for s in bad_steps]
    if progress.rollbacks >= cfg.stability.max_rollbacks:
        raise TrainingUnstable(f"{guard.consecutive} steps in a row updated nothing (steps {bad_steps.start + 1}-"
                               f"{bad_steps.stop}) after {progress.rollbacks} rollback(s) already: lower optim.lr, "
                               "check the data of batches " + ", ".join(map(str, bad))
                               + ", or raise stability.max_rollbacks")
    found = _read_newest(folder)
    if found is None:
        raise TrainingUnstable(f"{guard.consecutive} steps in a row updated nothing (steps {bad_steps.start + 1}-"
                               f"{bad_steps.stop}, batches {bad}) and there is no checkpoint to return to: lower "
                               "schedule.checkpoint_interval or optim.lr")
    keep = {"rollbacks": progress.rollbacks + 1, "skipped_steps": progress.skipped_steps,
            "skip_batches": insert_sorted(progress.skip_batches, bad), "run_id": progress.run_id}
    path, payload = found
    restore(path, payload, state)
    for key, value in keep.items():
        setattr(progress, key, value)
    lineage.rewind(progress.step)
    log.warning("rolled back to %s (step %d) after %d skipped steps in a row; batches %s are left out from now "
                "on (rollback %d of at most %d)", path, progress.step, len(bad), bad, progress.rollbacks,
                cfg.stability.max_rollbacks)


def _meta(cfg: TrainerConfig, manifest: Manifest) -> dict[str, Any]:
    # The manifest's location (a path or a URI) lets a checkpoint name the documents it saw (trainer/provenance.py).
    return {"config": as_dict(cfg), "manifest_sha256": manifest.sha256, "manifest_path": manifest.location,
            "tokenizer_model": manifest.tokenizer_model}


def _resume(folder: RunFolder, state: dict[str, Any], cfg: TrainerConfig, manifest_sha: str) -> None:
    found = _read_newest(folder)
    if found is None:
        log.warning("--resume: no checkpoint under %s; starting from step 0", join(folder.home, "checkpoints"))
        return
    path, payload = found
    payload_meta = payload["meta"]
    if payload_meta["manifest_sha256"] != manifest_sha:
        raise CheckpointError(f"{path} was trained on manifest {payload_meta['manifest_sha256'][:12]}…, not "
                              f"{manifest_sha[:12]}…; resume with the same shards or start a new --out")
    before, now = flatten(payload_meta["config"]), flatten(as_dict(cfg))
    changed = sorted(k for k in before.keys() | now.keys()
                     if before.get(k) != now.get(k) and k not in RESUMABLE_CHANGES)
    if changed:
        raise CheckpointError(f"{path}: settings changed since the checkpoint: "
                              + ", ".join(f"{k} {before.get(k)!r} -> {now.get(k)!r}" for k in changed)
                              + "; these change which batches and updates come next, so the run cannot resume")
    restore(path, payload, state)
    progress = state["progress"]
    log.warning("resuming from %s at step %d/%d (MLflow run %s)", path, progress.step, cfg.schedule.steps,
                progress.run_id)


class Throughput:
    """MFU per step (PaLM formula) against the device's bf16 peak; nothing to report on a CPU."""

    def __init__(self, cfg: TrainerConfig, non_embedding_parameters: int):
        m = cfg.model
        self.per_token = flops_per_token(non_embedding_parameters, m.num_layers, m.hidden_size, m.seq_length)
        self.peak = bf16_peak(torch.cuda.get_device_name()) if cfg.backend == "cuda" else None
        self.devices = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1

    def metrics(self, tokens_per_s: float) -> dict[str, float]:
        if not self.peak:
            return {}
        return {"mfu": mfu(tokens_per_s, self.per_token, self.peak, self.devices)}


def _shared(read):
    """`read()` on rank 0, its result (or its CheckpointError) on every rank: one rank touches the files."""
    if not (torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1):
        return read()
    box: list[Any] = [None]
    if torch.distributed.get_rank() == 0:
        try:
            box[0] = ("ok", read())
        except CheckpointError as exc:
            box[0] = ("error", str(exc))
    torch.distributed.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise CheckpointError(value)
    return value


def _read_newest(folder: RunFolder) -> tuple[str, dict[str, Any]] | None:
    """The newest readable checkpoint (rank 0 reads it, every rank gets it), as this rank reads it; None if none."""
    return folder.localize(_shared(lambda: _newest_readable(folder, folder.checkpoints())
                                   if folder.checkpoints() else None))


def _newest_readable(folder: RunFolder, candidates: list[str]) -> tuple[str, dict[str, Any]]:
    """The newest checkpoint that reads back whole; a damaged or truncated one is passed over, loudly."""
    problems = []
    for path in reversed(candidates):
        local, temporary = folder.local_copy(path)
        try:
            return path, read_checkpoint(local)
        except CheckpointError as exc:
            problems.append(str(exc))
            log.warning("--resume: %s; trying the checkpoint before it", exc)
        finally:
            if temporary:
                local.unlink(missing_ok=True)
                checksum_path(local).unlink(missing_ok=True)
    raise CheckpointError("no checkpoint of this run can be read: " + "; ".join(problems)
                          + "; start a new run with another --out")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", help="manifest.json: a path or a URI (default: <shards_dir>/manifest.json)")
    parser.add_argument("--out", help="run folder for checkpoints, lineage, result.json, a path or a URI "
                                      "(default: paths.train_dir)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint under --out")
    parser.add_argument("--stop-after", type=int, help="stop after this many steps as if killed (resume drills)")
    parser.add_argument("-o", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override conf/trainer.yaml; paths.KEY=VALUE overrides conf/paths.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("megatron").setLevel(logging.WARNING)   # its dataset index chatter drowns the progress line
    trainer_overrides, path_overrides = split_paths_overrides(args.overrides)
    try:
        cfg, paths = load_trainer_config(trainer_overrides), load_paths(path_overrides)
        train(cfg, paths, args.manifest, args.out, args.resume, args.stop_after)
    except (ConfigError, ManifestError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
