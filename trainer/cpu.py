"""megatron-core's tracked RNG streams on the CPU.

megatron forks named RNG streams (dropout in tensor-parallel regions, initialisation) through a
tracker of *CUDA* generator states, seeded by `model_parallel_cuda_manual_seed`.  The cpu backend
installs a tracker with the same stream names and seed offsets over torch's CPU generator, for the
length of the run (`cpu_rng_tracker`).  The other CPU patches are in trainer/mcore_patches.py.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

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


def build_stages_in_turn(build: Callable[[int], torch.nn.Module], chunks: int) -> list[torch.nn.Module]:
    """This rank's model chunks (`build(chunk)` for each of the `chunks` virtual stages, one without interleaving),
    built one pipeline stage after another in the whole model's layer order (chunk 0 of stage 0, of stage 1, ...,
    then chunk 1 of stage 0, ...), each starting from the RNG state the chunk before it ended in: with CPU
    initialisation they then draw exactly the initial weights one process draws for the whole model, in the same
    order, so a pipelined run starts where the single-process run starts.

    megatron's tied-embedding setup (an all-reduce between the first stage's first chunk and the last stage's last
    chunk, which draws nothing) is held back until every chunk exists: run where megatron runs it, the first
    stage would wait in it for a chunk built only after the first stage hands on its state again."""
    from megatron.core import parallel_state
    from trainer import mcore_patches

    group = parallel_state.get_pipeline_model_parallel_group()
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    tracker = mcore_random.get_cuda_rng_tracker()
    setup = mcore_patches.CPU_TIED_EMBEDDING.current()
    held_back: list[torch.nn.Module] = []

    def hold_back(model) -> None:   # a function, so that megatron's `self.setup...()` binds the model to it
        held_back.append(model)

    hold = mcore_patches.Patch("tied_embedding_after_build", mcore_patches.CPU_TIED_EMBEDDING.module,
                               mcore_patches.CPU_TIED_EMBEDDING.attribute, hold_back,
                               "set up the tied embedding once every chunk is built (its all-reduce would wait on "
                               "a chunk built later)")
    chunk_models = []
    with mcore_patches.applied((hold,)):
        for chunk in range(chunks):
            if rank > 0 or chunk > 0:   # from the stage before, or from the last stage's previous chunk
                box: list = [None]
                dist.recv_object_list(box, src=dist.get_global_rank(group, (rank - 1) % size), group=group)
                torch.set_rng_state(box[0]["torch"])
                tracker.set_states(box[0]["tracker"])
            chunk_models.append(build(chunk))
            if rank < size - 1 or chunk < chunks - 1:
                state = {"torch": torch.get_rng_state(), "tracker": tracker.get_states()}
                dist.send_object_list([state], dst=dist.get_global_rank(group, (rank + 1) % size), group=group)
    for model in held_back:
        setup(model)
    return chunk_models
