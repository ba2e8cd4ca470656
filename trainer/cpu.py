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
