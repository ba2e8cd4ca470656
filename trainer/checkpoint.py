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


def save_checkpoint(folder: Path, step: int, parts: dict[str, Stateful], meta: dict[str, Any],
                    keep: int | None) -> Path:
    """Write `step-<step>.pt` atomically; then delete all but the newest `keep` (None: delete nothing)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = checkpoint_path(folder, step)
    payload = {name: part.state_dict() for name, part in parts.items()} | {"meta": meta}
    tmp = target.with_name(target.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, target)     # atomic on POSIX: readers see the old set or the new file, never half of it
    for old in list_checkpoints(folder)[:-keep] if keep is not None else ():
        old.unlink()
    return target


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's payload: one state dict per part, plus `meta` (config, manifest sha)."""
    # weights_only=False: the file holds numpy/python RNG states, and we wrote it ourselves.
    return torch.load(path, map_location="cpu", weights_only=False)


def restore(path: Path, payload: dict[str, Any], parts: dict[str, Stateful]) -> None:
    missing = set(parts) - set(payload)
    if missing:
        raise CheckpointError(f"{path} lacks parts {sorted(missing)}; it was written by another trainer version")
    for name, part in parts.items():
        part.load_state_dict(payload[name])
