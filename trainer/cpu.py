"""megatron-core's tracked RNG streams on the CPU.

megatron forks named RNG streams (dropout in tensor-parallel regions, initialisation) through a
tracker of *CUDA* generator states, seeded by `model_parallel_cuda_manual_seed`.  The cpu backend
installs a tracker with the same stream names and seed offsets over torch's CPU generator, for the
length of the run (`cpu_rng_tracker`).  The other CPU patches are in trainer/mcore_patches.py.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.distributed as dist
from megatron.core.tensor_parallel import random as mcore_random


class CpuRNGStatesTracker(mcore_random.CudaRNGStatesTracker):
    """megatron's named RNG streams kept as torch CPU generator states instead of CUDA ones."""

    def add(self, name, seed):
        self._is_initialized = True
        if seed in self.seeds_:
            raise ValueError(f"RNG seed {seed} is already tracked")
        if name in self.states_:
            raise ValueError(f"RNG state {name!r} is already tracked")
        self.seeds_.add(seed)
        outer = torch.get_rng_state()
        torch.manual_seed(seed)
        self.states_[name] = torch.get_rng_state()
        torch.set_rng_state(outer)

    @contextlib.contextmanager
    def fork(self, name=mcore_random._MODEL_PARALLEL_RNG_TRACKER_NAME):
        if name not in self.states_:
            raise KeyError(f"RNG state {name!r} was never added to the tracker")
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)


def seed_cpu_rng_tracker(seed: int, tp_rank: int = 0) -> CpuRNGStatesTracker:
    """The CPU twin of `model_parallel_cuda_manual_seed` (ep=1): same stream names, same seed offsets."""
    tracker = CpuRNGStatesTracker()
    tracker.add(mcore_random._DATA_PARALLEL_RNG_TRACKER_NAME, seed)
    tracker.add(mcore_random._MODEL_PARALLEL_RNG_TRACKER_NAME, seed + 2718 + tp_rank)
    tracker.add(mcore_random._EXPERT_PARALLEL_RNG_TRACKER_NAME, seed + 1024 + tp_rank)
    mcore_random._CUDA_RNG_STATE_TRACKER = tracker
    mcore_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    return tracker


@contextlib.contextmanager
def cpu_rng_tracker(seed: int, tp_rank: int = 0) -> Iterator[CpuRNGStatesTracker]:
    """Install a CpuRNGStatesTracker as megatron's tracker; put back whatever was there on exit."""
    before = mcore_random._CUDA_RNG_STATE_TRACKER, mcore_random._CUDA_RNG_STATE_TRACKER_INITIALIZED
    try:
        yield seed_cpu_rng_tracker(seed, tp_rank)
    finally:
        mcore_random._CUDA_RNG_STATE_TRACKER, mcore_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = before


@contextlib.contextmanager
def pipeline_stages_in_turn() -> Iterator[None]:
    """Build the pipeline stages one after another, each starting from the RNG state the stage before it ended
    in: with CPU initialisation the stages then draw exactly the initial weights one process draws for the
    whole model (in the same order), so a pipelined run starts where the single-process run starts.

    A stage hands its state on as soon as its weights exist: before megatron's tied-embedding setup, whose
    all-reduce between the first and last stage would otherwise wait for a stage still waiting for it."""
    from megatron.core import parallel_state
    from trainer import mcore_patches

    group = parallel_state.get_pipeline_model_parallel_group()
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    tracker = mcore_random.get_cuda_rng_tracker()
    handed_on = rank == size - 1

    def hand_on() -> None:
        nonlocal handed_on
        if not handed_on:
            state = {"torch": torch.get_rng_state(), "tracker": tracker.get_states()}
            dist.send_object_list([state], dst=dist.get_global_rank(group, rank + 1), group=group)
            handed_on = True

    setup = mcore_patches.CPU_TIED_EMBEDDING.current()

    def hand_on_then_setup(model) -> None:
        hand_on()
        return setup(model)

    if rank > 0:
        box: list = [None]
        dist.recv_object_list(box, src=dist.get_global_rank(group, rank - 1), group=group)
        torch.set_rng_state(box[0]["torch"])
        tracker.set_states(box[0]["tracker"])
    handoff = mcore_patches.Patch("rng_hand_on", mcore_patches.CPU_TIED_EMBEDDING.module,
                                  mcore_patches.CPU_TIED_EMBEDDING.attribute, hand_on_then_setup,
                                  "hand the RNG state on before the first/last-stage embedding all-reduce")
    with mcore_patches.applied((handoff,)):
        yield
    hand_on()   # a middle stage has no embedding to set up
