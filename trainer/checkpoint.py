"""Checkpoints: every named part of the trainer's state, in one of two formats.

The state is a small dict of parts with `state_dict()`/`load_state_dict()` (torchtitan): model,
optimizer, scheduler, progress (step, tokens, data position, run id) and rng.
- gathered: `step-<step>.pt`, one `torch.save` file of the whole state, written by rank 0;
- sharded (`schedule.checkpoint_format`): a folder `step-<step>/` that every rank writes its shards into
  through torch.distributed.checkpoint (parts with `sharded_state_dict`: trainer/sharded_state.py), each
  rank's RNG states in `rng-<rank>.pt`, the rest in `common.pt`, and `SHA256SUMS` over every file.  With
  staging per node (`per_node`: a bucket train_dir, ranks on several machines, no shared staging) each node's
  folder holds only its ranks' files: rank 0's SHA256SUMS lists them all (each node's local rank 0 hashes its
  own and sends the lines), and every other node keeps its lines in `SHA256SUMS.rank-<rank>` for its upload.
Both are written under a temporary name, fsynced, then renamed, so a run killed mid-save never leaves a
half checkpoint behind; a sidecar `<name>.sha256` holds the file's (gathered) or SHA256SUMS's (sharded)
sha256 and is verified on load.
"""
from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import shutil
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import torch
import torch.distributed as dist
from megatron.core.tensor_parallel import random as mcore_random

import storage
from trainer.manifest import file_sha256

log = logging.getLogger("trainer.checkpoint")

CHECKPOINT_NAME = re.compile(r"^step-(\d{8})\.pt$")   # gathered: one file
SHARDED_NAME = re.compile(r"^step-(\d{8})$")           # sharded: a folder
SUMS, COMMON = "SHA256SUMS", "common.pt"
NODE_SUMS = SUMS + ".rank-"   # + the rank (05d) of a node's local rank 0: that node's lines of SUMS (per-node staging)


# Told a checkpoint's path and sha256 once it is visible (at once, or from the worker of an asynchronous save).
OnVisible = Callable[[Path, str], None]


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from as configured."""


class RNGState:
    """Every generator a step may draw from: python, numpy, torch CPU (and CUDA, on a GPU), and megatron's
    tracked streams."""

    def state_dict(self) -> dict[str, Any]:
        tracker = mcore_random.get_cuda_rng_tracker()
        state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                 "tracker": {k: v.clone() for k, v in tracker.get_states().items()}}
        if torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, dict):   # a sharded checkpoint's reference: this rank's own file
            state = _rank_rng(state.path)
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_initialized():
            torch.cuda.set_rng_state(state["cuda"])
        mcore_random.get_cuda_rng_tracker().set_states({k: v.clone() for k, v in state["tracker"].items()})


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def local_rank() -> int:
    """The rank within this machine (torchrun's LOCAL_RANK; 0 in a single process)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def _layout() -> dict[str, int]:
    from megatron.core import parallel_state
    if not parallel_state.model_parallel_is_initialized():
        return {"world": 1, "tp": 1, "pp": 1, "tp_rank": 0}
    return {"world": dist.get_world_size(), "tp": parallel_state.get_tensor_model_parallel_world_size(),
            "pp": parallel_state.get_pipeline_model_parallel_world_size(),
            "tp_rank": parallel_state.get_tensor_model_parallel_rank()}


def _rank_rng(path: str) -> dict[str, Any]:
    """This rank's RNG states from a sharded checkpoint: its own file at the layout that wrote it; at another
    layout rank 0's python/numpy/torch states, and the tracker of a rank with this rank's tensor-parallel rank."""
    folder, here = Path(path), _layout()
    read = lambda rank: torch.load(folder / f"rng-{rank:05d}.pt", weights_only=False)   # noqa: E731  (we wrote it)
    own = folder / f"rng-{_rank():05d}.pt"
    if own.exists():
        saved = read(_rank())
        if {k: saved["layout"][k] for k in ("world", "tp", "pp")} == {k: here[k] for k in ("world", "tp", "pp")}:
            return saved["state"]
    state = read(0)["state"]
    peer = folder / f"rng-{here['tp_rank']:05d}.pt"
    if peer.exists() and read(here["tp_rank"])["layout"]["tp_rank"] == here["tp_rank"]:
        state = dict(state, tracker=read(here["tp_rank"])["state"]["tracker"])
    else:
        log.warning("%s was written at another tensor-parallel layout: megatron's tracked RNG streams (dropout) "
                    "start again from the seed", folder.name)
        state = dict(state, tracker=mcore_random.get_cuda_rng_tracker().get_states())
    return state


def checkpoint_path(folder: Path, step: int, sharded: bool = False) -> Path:
    return folder / (f"step-{step:08d}" if sharded else f"step-{step:08d}.pt")


def checkpoint_step(path: Path) -> int:
    return int((CHECKPOINT_NAME.match(path.name) or SHARDED_NAME.match(path.name)).group(1))


def list_checkpoints(folder: Path) -> list[Path]:
    """Gathered files and sharded folders, oldest step first (after this process's save in flight lands)."""
    wait_for_saves()
    return _listed(folder)


def _listed(folder: Path) -> list[Path]:
    """The visible checkpoints now, without waiting for a save in flight (for threads other than training's)."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir()
             if CHECKPOINT_NAME.match(p.name) or (SHARDED_NAME.match(p.name) and p.is_dir())]
    return sorted(found, key=lambda p: (checkpoint_step(p), p.name))


listed_checkpoints = _listed


def latest_checkpoint(folder: Path) -> Path | None:
    found = list_checkpoints(folder)
    return found[-1] if found else None


def checksum_path(checkpoint: Path) -> Path:
    """The sidecar holding a checkpoint's sha256 (torch's zip format checks no CRC on load: a flipped byte
    inside a tensor loads silently)."""
    return checkpoint.with_name(checkpoint.name + ".sha256")


def _write_durably(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)       # atomic on POSIX: readers see the old set or the new file, never half of it


def _sharded_parts(parts: dict[str, Stateful]) -> list[str]:
    # trainer/sharded_state.py's parts (megatron's own modules have a `sharded_state_dict` of another kind)
    return [name for name, part in parts.items() if hasattr(part, "sharded_extra")]


def save_checkpoint(folder: Path, step: int, parts: dict[str, Stateful], meta: dict[str, Any],
                    keep: int | None, sharded: bool | None = None, on_visible: OnVisible | None = None,
                    per_node: bool = False) -> Path | None:
    """Write checkpoint `step` (every rank calls this), the checkpoint made visible last; then rank 0 deletes all
    but the newest `keep` (None: delete nothing) and calls `on_visible(path, sha256)`.  Sharded when the parts can
    be and `sharded` (None: `schedule.checkpoint_format` in meta's config) says so; `per_node` when each machine
    has its own `folder` (then every node's local rank 0 makes its part visible there and calls `on_visible` with
    its part's path and the sha256 of its lines).  Rank 0 returns the checkpoint's path, the others None."""
    if sharded is None:   # as the run is configured (parts that cannot be sharded write the gathered format)
        sharded = meta.get("config", {}).get("schedule", {}).get("checkpoint_format", "sharded") == "sharded"
    if sharded and _sharded_parts(parts):
        return _save_sharded(folder, step, parts, meta, keep, on_visible, per_node)
    elif _rank() != 0:
        for part in parts.values():   # gathering the whole state is collective: every rank takes part
            part.state_dict()
        return None
    else:
        target = _save_gathered(folder, step, parts, meta)
    if target is not None:
        _prune(folder, keep)
        _tell(on_visible, target, checkpoint_sha256(target))
    return target


def _tell(on_visible: OnVisible | None, target: Path, digest: str) -> None:
    if on_visible is None:
        return
    try:
        on_visible(target, digest)
    except Exception as exc:  # noqa: BLE001  (a tag or an upload queue that fails loses no checkpoint)
        log.warning("checkpoint %s is written, but what follows its save failed (%s: %s)", target,
                    type(exc).__name__, exc)


def _prune(folder: Path, keep: int | None) -> None:
    for old in _listed(folder)[:-keep] if keep is not None else ():
        shutil.rmtree(old) if old.is_dir() else old.unlink()
        checksum_path(old).unlink(missing_ok=True)
    found = _listed(folder)
    for partial in folder.glob("step-*.partial") if found else ():   # saves killed before they were made visible
        if partial.is_dir() and SHARDED_NAME.match(partial.name[:-8]) and \
                int(SHARDED_NAME.match(partial.name[:-8]).group(1)) < checkpoint_step(found[-1]):
            shutil.rmtree(partial, ignore_errors=True)


def _save_gathered(folder: Path, step: int, parts: dict[str, Stateful], meta: dict[str, Any]) -> Path:
    """`step-<step>.pt` and its sha256 sidecar, fsynced."""
    folder.mkdir(parents=True, exist_ok=True)
    target = checkpoint_path(folder, step)
    payload = {name: part.state_dict() for name, part in parts.items()} | {"meta": meta}
    staged = target.with_name(target.name + ".partial")
    _write_durably(staged, lambda f: torch.save(payload, f))
    digest = file_sha256(staged)
    _write_durably(checksum_path(target), lambda f: f.write(f"{digest}  {target.name}\n".encode()))
    os.replace(staged, target)
    storage.fsync_dir(folder)
    return target


class _AsyncSaves:
    """Sharded saves in flight (torch DCP's async_save): at most one; its checkpoint is made visible (SHA256SUMS,
    rename) by a worker as soon as every rank's shards are written, and the next save, the end of the run and
    any listing of checkpoints wait for it first.  DCP's background collectives run on a gloo group of their own,
    so they never interleave with training's."""

    def __init__(self) -> None:
        self.pending: Future | None = None
        self.group, self.world = None, None
        self.publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-publish")

    def process_group(self):
        world = dist.group.WORLD
        if self.world is not world:   # a new default group (several runs in one process): a new checkpoint group
            self.group, self.world = dist.new_group(backend="gloo"), world
        return self.group

    def wait(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception as exc:  # noqa: BLE001  (a failed save loses that checkpoint, not the run)
                log.error("an asynchronous checkpoint save failed (%s: %s); the checkpoint before it stays the latest",
                          type(exc).__name__, exc)


ASYNC_SAVES = _AsyncSaves()


def wait_for_saves() -> None:
    """Block until this process's asynchronous checkpoint save (if any) is written and visible."""
    ASYNC_SAVES.wait()


def _save_sharded(folder: Path, step: int, parts: dict[str, Stateful], meta: dict[str, Any],
                  keep: int | None, on_visible: OnVisible | None = None, per_node: bool = False) -> Path | None:
    """`step-<step>/`: every rank writes its shards and RNG states into `step-<step>.partial/`, rank 0 the common
    state and SHA256SUMS, then renames the folder into place (per node: `_finish`).  With
    `schedule.checkpoint_async` (except the run's last step) the shards are written by DCP's async_save from a
    snapshot while training goes on."""
    from torch.distributed.checkpoint import FileSystemWriter, async_save, save

    schedule = meta.get("config", {}).get("schedule", {})
    asynchronous = bool(schedule.get("checkpoint_async")) and step < schedule.get("steps", step)
    ASYNC_SAVES.wait()   # one save at a time: the previous one is visible before the next begins
    target = checkpoint_path(folder, step, sharded=True)
    staged = folder / f"{target.name}.partial"
    rank, distributed = _rank(), dist.is_initialized() and dist.get_world_size() > 1
    per_node = per_node and distributed
    if rank == 0 or (per_node and local_rank() == 0):   # each machine's folder is made ready by one of its ranks
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staged, ignore_errors=True)   # left by a run killed mid-save
        staged.mkdir()
    if distributed:
        dist.barrier()
    sharded = _sharded_parts(parts)
    rng = {"state": parts["rng"].state_dict(), "layout": _layout()} if "rng" in parts else None
    extra = {name: parts[name].sharded_extra() for name in sharded}   # collective under pipeline parallelism
    # an asynchronous save writes a snapshot: the next steps change the weights and moments in place
    state = {k: v for name in sharded for k, v in parts[name].sharded_state_dict(copy=asynchronous).items()}
    if rng is not None:
        _write_durably(staged / f"rng-{rank:05d}.pt", lambda f: torch.save(rng, f))
    if rank == 0:
        common = {name: part.state_dict() for name, part in parts.items() if name not in sharded and name != "rng"}
        common |= {"meta": meta, "sharded": extra, "layout": _layout()}
        _write_durably(staged / COMMON, lambda f: torch.save(common, f))
    writer = FileSystemWriter(str(staged), sync_files=True)
    group = ASYNC_SAVES.process_group() if dist.is_initialized() else None
    if not asynchronous:
        save(state, storage_writer=writer)
        _finish(staged, target, keep, on_visible, per_node, group)
        return target if rank == 0 else None
    written = async_save(state, storage_writer=writer, process_group=group)
    # every rank's future resolves once every rank's shards and the metadata are written: then it can be published
    ASYNC_SAVES.pending = ASYNC_SAVES.publisher.submit(
        lambda: (written.result(), _finish(staged, target, keep, on_visible, per_node, group)))
    return target if rank == 0 else None


def _finish(staged: Path, target: Path, keep: int | None, on_visible: OnVisible | None, per_node: bool,
            group) -> None:
    """Make a written checkpoint visible: rank 0 publishes it.  Per node, each node's local rank 0 first hashes
    the files its node wrote and every rank learns those lines (a collective on the checkpoint group); rank 0's
    SHA256SUMS lists every node's files, and the other nodes make their parts visible with their own lines."""
    rank = _rank()
    if not per_node:
        if rank == 0:
            _publish(staged, target, keep, on_visible)
        return
    mine = _sums(staged) if local_rank() == 0 else ""
    lines: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(lines, (rank, mine), group=group)
    if rank == 0:
        _publish(staged, target, keep, on_visible, elsewhere="".join(text for r, text in lines if r != 0))
    elif mine:
        _write_durably(staged / f"{NODE_SUMS}{rank:05d}", lambda f: f.write(mine.encode()))
        storage.fsync_dir(staged)
        _make_visible(staged, target)
        _tell(on_visible, target, hashlib.sha256(mine.encode()).hexdigest())


def _sums(folder: Path) -> str:
    return "".join(f"{file_sha256(p)}  {p.relative_to(folder)}\n" for p in sorted(folder.rglob("*"))
                   if p.is_file() and p.name != SUMS)


def _publish(staged: Path, target: Path, keep: int | None, on_visible: OnVisible | None = None,
             elsewhere: str = "") -> None:
    """SHA256SUMS over every file of `staged` (and the lines of files that other nodes hold, `elsewhere`), the
    sidecar, then `staged` renamed to `target`, all fsynced; then all but the newest `keep` checkpoints deleted,
    and `on_visible` told."""
    sums = _sums(staged)
    if elsewhere:   # one list, by name, whichever machine holds each file
        sums = "".join(sorted((sums + elsewhere).splitlines(keepends=True), key=lambda line: line.split("  ", 1)[1]))
    _write_durably(staged / SUMS, lambda f: f.write(sums.encode()))
    storage.fsync_dir(staged)
    digest = hashlib.sha256(sums.encode()).hexdigest()
    _write_durably(checksum_path(target), lambda f: f.write(f"{digest}  {target.name}/{SUMS}\n".encode()))
    _make_visible(staged, target)
    log.info("checkpoint %s written (sha256 of %s %s)", target, SUMS, digest[:12])
    _prune(target.parent, keep)
    _tell(on_visible, target, digest)


def _make_visible(staged: Path, target: Path) -> None:
    if target.exists():   # the same step written again (after a rollback): the old copy goes first
        aside = target.with_name(target.name + ".old")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(target, aside)
        shutil.rmtree(aside)
    os.replace(staged, target)
    storage.fsync_dir(target.parent)


def checkpoint_sha256(path: Path) -> str:
    """The digest a checkpoint's sidecar records; "pending" while an asynchronous save is still writing it."""
    sidecar = checksum_path(path)
    return sidecar.read_text().split()[0] if sidecar.exists() else "pending"


def read_checkpoint(path: Path, checksum: Path | None = None) -> dict[str, Any]:
    """The checkpoint's payload (one state dict per part, plus `meta`), verified against its sha256 sidecar
    when there is one; CheckpointError when the file is damaged or unreadable.  For a sharded checkpoint
    every file is checked against SHA256SUMS, and the sharded parts are `ShardedRef`s that each rank loads."""
    if path.is_dir():
        return _read_sharded(path, checksum or checksum_path(path))
    checksum = checksum or checksum_path(path)
    if checksum.exists():
        expected = checksum.read_text().split()[0] if checksum.read_text().strip() else ""
        actual = file_sha256(path)
        if actual != expected:
            raise CheckpointError(f"{path}: sha256 {actual[:12]}… is not the {expected[:12] or 'empty'}… its "
                                  f"{checksum.name} records: the file is damaged")
    try:
        # weights_only=False: the file holds numpy/python RNG states, and we wrote it ourselves.
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001  (torch raises RuntimeError, EOFError, UnpicklingError...: all mean unreadable)
        raise CheckpointError(f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:200]}); it is truncated "
                              "or damaged") from exc


def restore(path: Path, payload: dict[str, Any], parts: dict[str, Stateful]) -> None:
    missing = set(parts) - set(payload)
    if missing:
        raise CheckpointError(f"{path} lacks parts {sorted(missing)}; it was written by another trainer version")
    for name, part in parts.items():
        part.load_state_dict(payload[name])


def _read_sharded(path: Path, checksum: Path) -> dict[str, Any]:
    from trainer.sharded_state import ShardedRef

    sums = path / SUMS
    if not sums.is_file():
        raise CheckpointError(f"{path} has no {SUMS}: it was not written to the end")
    listed = sums.read_text()
    if checksum.exists():
        expected = (checksum.read_text().split() or [""])[0]
        if hashlib.sha256(listed.encode()).hexdigest() != expected:
            raise CheckpointError(f"{path}/{SUMS} is not the one its {checksum.name} records: the checkpoint is damaged")
    names = set()
    for line in listed.splitlines():
        expected, name = line.split("  ", 1)
        names.add(name)
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{path}: {name} is missing; the checkpoint is incomplete")
        if file_sha256(file) != expected:
            raise CheckpointError(f"{path}: {name} is not the file {SUMS} records (sha256 {expected[:12]}…): the "
                                  "checkpoint is damaged")
    if COMMON not in names or ".metadata" not in names:
        raise CheckpointError(f"{path} lacks {COMMON} or .metadata: it is not a whole sharded checkpoint")
    try:
        payload = torch.load(path / COMMON, map_location="cpu", weights_only=False)   # we wrote it
    except Exception as exc:  # noqa: BLE001  (unreadable for any reason means damaged)
        raise CheckpointError(f"{path}/{COMMON} cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from exc
    for name, extra in payload.pop("sharded").items():
        payload[name] = ShardedRef(str(path), name, extra)
    payload["rng"] = ShardedRef(str(path), "rng")
    return payload


def whole_state(path: Path) -> dict[str, Any]:
    """A sharded checkpoint's model and optimizer as the gathered format holds them (one process's names and
    optimizer numbering), read in this process without a process group: for tools and tests."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    payload = read_checkpoint(path)
    with warnings.catch_warnings():   # "no process group: loading in a single process" is the point here
        warnings.simplefilter("ignore", UserWarning)
        flat = _load_state_dict_from_keys(checkpoint_id=str(path))
    model = {name: flat.get(f"model/{name}") for name in payload["model"].extra["names"]}
    optimizer = payload["optimizer"].extra
    index = {name: i for i, name in enumerate(n for group in optimizer["names"] for n in group)}
    state: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith("optimizer/"):
            _, name, moment = key.rsplit("/", 2)
            state.setdefault(index[name], {})[moment] = value
    groups, start = [], 0
    for settings, names in zip(optimizer["groups"], optimizer["names"]):
        groups.append(dict(settings, params=list(range(start, start + len(names)))))
        start += len(names)
    return payload | {"model": model, "optimizer": {"state": dict(sorted(state.items())), "param_groups": groups}}


# -- checkpoints in an object store (a remote train_dir) ------------------------------------------------------------
# A sharded checkpoint there is a prefix `step-N/` whose SHA256SUMS object is uploaded last: it counts as written only
# once that object exists, so a reader never takes an upload cut short for a checkpoint.

def stored_checkpoints(folder: str) -> list[str]:
    """The names of the whole checkpoints under `folder` (a path or URI): `step-N.pt` objects and `step-N` prefixes
    that hold their SHA256SUMS; sorted oldest first."""
    names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in storage.listdir(folder)]
    found = [n for n in names if CHECKPOINT_NAME.match(n)
             or (SHARDED_NAME.match(n) and storage.exists(storage.join(folder, n, SUMS)))]
    return sorted(found, key=lambda n: (int(n[5:13]), n))


def remove_stored(folder: str, name: str) -> None:
    """Delete a stored checkpoint and its sidecar, its SHA256SUMS first, so that no reader lists it half deleted."""
    where = storage.join(folder, name)
    if SHARDED_NAME.match(name):
        storage.remove(storage.join(where, SUMS))
        storage.remove(where, recursive=True)
    else:
        storage.remove(where)
    storage.remove(where + ".sha256")


def download_checkpoint(location: str, target: Path) -> Path:
    """Copy the checkpoint at `location` (a `step-N.pt` object or a `step-N/` prefix) and its sidecar to `target`;
    read_checkpoint then verifies every file against them.  FileNotFoundError when it is not there."""
    if target.is_dir():
        shutil.rmtree(target)
    target.unlink(missing_ok=True)
    sidecar = checksum_path(target)
    sidecar.unlink(missing_ok=True)
    if storage.exists(location + ".sha256"):
        storage.get_file(location + ".sha256", sidecar)
    if not SHARDED_NAME.match(location.rstrip("/").rsplit("/", 1)[-1]):
        storage.get_file(location, target)
        return target
    listed = storage.read_text(storage.join(location, SUMS))   # FileNotFoundError: not (completely) uploaded
    target.mkdir(parents=True)
    for line in listed.splitlines():
        name = line.split("  ", 1)[1]
        storage.get_file(storage.join(location, *name.split("/")), target / name)
    _write_durably(target / SUMS, lambda f: f.write(listed.encode()))
    return target
