"""The patches that let megatron-core's GPTModel train on a CPU (megatron-core 0.16.1).

megatron-core assumes CUDA in a few places that the forward/backward pass touches even at
tp=pp=1.  Each patch below replaces one of them with the same logic on the CPU, is applied
explicitly by the cpu backend (`apply_cpu_patches()`), and is idempotent.  They are not applied
on import, so a CUDA run never sees them.  Upstream is removing these assumptions
(NVIDIA/Megatron-LM PR #6270); drop a patch when the pinned version no longer needs it.
"""
from __future__ import annotations

import contextlib
import functools
import operator

import torch
from megatron.core import utils as mcore_utils
from megatron.core.fusions import fused_softmax
from megatron.core.models.common.embeddings import rotary_pos_embedding
from megatron.core.tensor_parallel import random as mcore_random

_APPLIED = False


def _cpu_get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
    # Patch 1, why: GlobalMemoryBuffer.get_tensor allocates on torch.cuda.current_device(), which raises
    # without a driver; the linear layers ask it for scratch space. Same caching logic, on "cpu".
    required = functools.reduce(operator.mul, tensor_shape, 1)
    buffer = self.buffer.get((name, dtype))
    if buffer is None or buffer.numel() < required:
        buffer = self.buffer[(name, dtype)] = torch.empty(required, dtype=dtype, device="cpu")
    return buffer[:required].view(*tensor_shape)


class CpuRNGStatesTracker(mcore_random.CudaRNGStatesTracker):
    """Patch 2, why: megatron forks named RNG streams (dropout in parallel regions, init) through a
    tracker that stores *CUDA* generator states, seeded by `model_parallel_cuda_manual_seed`.  This
    tracker keeps the same named streams as torch CPU generator states."""

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


def seed_cpu_rng_tracker(seed: int) -> CpuRNGStatesTracker:
    """The CPU twin of `model_parallel_cuda_manual_seed` at tp=ep=1: same stream names, same seed offsets."""
    tracker = CpuRNGStatesTracker()
    tracker.add(mcore_random._DATA_PARALLEL_RNG_TRACKER_NAME, seed)
    tracker.add(mcore_random._MODEL_PARALLEL_RNG_TRACKER_NAME, seed + 2718)
    tracker.add(mcore_random._EXPERT_PARALLEL_RNG_TRACKER_NAME, seed + 1024)
    mcore_random._CUDA_RNG_STATE_TRACKER = tracker
    mcore_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    return tracker


def _cpu_default_causal_mask(sq: int) -> torch.Tensor:
    # Patch 3, why: the unfused softmax builds its default causal mask with device="cuda" when the
    # caller passes no mask. Same upper-triangular mask, on the CPU.
    return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)


def _cpu_rope_get_emb(self, max_seq_len: int, offset: int = 0) -> torch.Tensor:
    # Patch 4, why: RotaryEmbedding.get_emb moves inv_freq to torch.cuda.current_device() on first use.
    # This is the same computation (non-interleaved and interleaved) with inv_freq left where it is.
    freqs = self.get_freqs_non_repeated(max_seq_len, offset)
    if not self.rotary_interleaved:
        emb = torch.cat((freqs, freqs), dim=-1)
    else:
        emb = torch.stack((freqs.view(-1, 1), freqs.view(-1, 1)), dim=-1).view(freqs.shape[0], -1)
    return emb[:, None, None, :]


def apply_cpu_patches() -> None:
    """Install the four CPU patches once; calling again is a no-op."""
    global _APPLIED
    if _APPLIED:
        return
    mcore_utils.GlobalMemoryBuffer.get_tensor = _cpu_get_tensor
    fused_softmax.get_default_causal_mask = _cpu_default_causal_mask
    rotary_pos_embedding.RotaryEmbedding.get_emb = _cpu_rope_get_emb
    _APPLIED = True


def patches_applied() -> bool:
    return _APPLIED
