"""Checkpoints: one `torch.save` file per step holding every named part of the trainer's state.

The state is a small dict of parts with `state_dict()`/`load_state_dict()` (torchtitan): model,
optimizer, scheduler, progress (step, tokens, data position, run id) and rng.  Files are written
to a temporary name and renamed, so a run killed mid-save never leaves a half checkpoint behind.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from megatron.core.tensor_parallel import random as mcore_random

from trainer.manifest import file_sha256

CHECKPOINT_NAME = re.compile(r"^step-(\d{8})\.pt$")


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

    def load_state_dict(self, state: dict[str, Any]) -> None:
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_initialized():
            torch.cuda.set_rng_state(state["cuda"])
        mcore_random.get_cuda_rng_tracker().set_states({k: v.clone() for k, v in state["tracker"].items()})


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:08d}.pt"


def list_checkpoints(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if CHECKPOINT_NAME.match(p.name))


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


def save_checkpoint(folder: Path, step: int, parts: dict[str, Stateful], meta: dict[str, Any],
                    keep: int | None) -> Path:
    """Write `step-<step>.pt` and its sha256 sidecar, fsynced, the checkpoint made visible last; then delete
    all but the newest `keep` (None: delete nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = checkpoint_path(folder, step)
    payload = {name: part.state_dict() for name, part in parts.items()} | {"meta": meta}
    staged = target.with_name(target.name + ".partial")
    _write_durably(staged, lambda f: torch.save(payload, f))
    digest = file_sha256(staged)
    _write_durably(checksum_path(target), lambda f: f.write(f"{digest}  {target.name}\n".encode()))
    os.replace(staged, target)
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)     # the renames themselves survive a power cut
    finally:
        os.close(directory)
    for old in list_checkpoints(folder)[:-keep] if keep is not None else ():
        old.unlink()
        checksum_path(old).unlink(missing_ok=True)
    return target


def read_checkpoint(path: Path, checksum: Path | None = None) -> dict[str, Any]:
    """The checkpoint's payload (one state dict per part, plus `meta`), verified against its sha256 sidecar
    when there is one; CheckpointError when the file is damaged or unreadable."""
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
