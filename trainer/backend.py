"""Where the model runs: process groups, megatron's parallel state, RNG streams, and the device.

`open_backend(cfg)` is a context manager so several runs can share one Python process (tests):
everything it sets up, it tears down.
"""
from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from conf import ConfigError
from trainer import mcore_patches
from trainer.config import TrainerConfig
from trainer.parallel import ParallelDims


@dataclass(frozen=True)
class Backend:
    name: str
    device: torch.device
    dims: ParallelDims
    rank: int
    dp_rank: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def open_backend(cfg: TrainerConfig) -> Iterator[Backend]:
    if cfg.backend == "cuda":
        with _open_cuda(cfg) as backend:
            yield backend
        return
    if cfg.backend != "cpu":
        raise ConfigError(f"unknown backend {cfg.backend!r}; known: cpu, cuda")
    from trainer.cpu import cpu_rng_tracker

    owns_group = not dist.is_initialized()
    if owns_group:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:   # launched by torchrun: one process per rank
            dist.init_process_group("gloo")
        else:   # world size 1 on a free loopback port: gloo needs a rendezvous even for one process
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        dims = ParallelDims(tp=cfg.parallel.tp, pp=cfg.parallel.pp, cp=cfg.parallel.cp, dp=cfg.parallel.dp,
                            world_size=dist.get_world_size(), vp=cfg.parallel.vp)
        dims.require_cpu_layout()
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=dims.tp,
                                                 pipeline_model_parallel_size=dims.pp,
                                                 virtual_pipeline_model_parallel_size=dims.vp if dims.vp > 1 else None,
                                                 context_parallel_size=dims.cp)
        torch.manual_seed(cfg.seed)
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        with mcore_patches.applied(mcore_patches.CPU_PATCHES), cpu_rng_tracker(cfg.seed, tp_rank):
            yield Backend(name="cpu", device=torch.device("cpu"), dims=dims, rank=dist.get_rank(),
                          dp_rank=parallel_state.get_data_parallel_rank())
    finally:
        parallel_state.destroy_model_parallel()
        if owns_group:
            dist.destroy_process_group()


@contextlib.contextmanager
def _deterministic(on: bool) -> Iterator[None]:
    """Deterministic CUDA kernels for the length of the run (flash attention's backward, embedding grads,
    cuBLAS's workspace); an op without a deterministic version fails the run with torch's message."""
    if not on:
        yield
        return
    # cuBLAS reads this when it creates its handle: effective when the run is the process's first CUDA work.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cuda.cudnn_sdp_enabled())
    # Strict: with warn_only, flash attention's backward keeps its non-deterministic algorithm (it only warns).
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.enable_cudnn_sdp(False)   # SDPA then takes flash attention, which has a deterministic backward
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cuda.enable_cudnn_sdp(before[2])


@contextlib.contextmanager
def _open_cuda(cfg: TrainerConfig) -> Iterator[Backend]:
    """NCCL process groups (from torchrun's environment, or a world of one), megatron's parallel state and
    its tracked CUDA RNG streams, and the megatron patches the cuda settings ask for."""
    if not torch.cuda.is_available():
        raise ConfigError("backend 'cuda' needs an NVIDIA GPU and torch sees none; run with -o backend=cpu")
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    owns_group = not dist.is_initialized()
    if owns_group:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:   # launched by torchrun (or SLURM + env)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        else:
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1,
                                    device_id=torch.device("cuda", local_rank))
    try:
        dims = ParallelDims(tp=cfg.parallel.tp, pp=cfg.parallel.pp, cp=cfg.parallel.cp, dp=cfg.parallel.dp,
                            world_size=dist.get_world_size(), vp=cfg.parallel.vp)
        from trainer.gpu import require_cuda_layout   # here: trainer/gpu.py builds on this module
        require_cuda_layout(cfg, dims)
    except ConfigError:
        if owns_group:
            dist.destroy_process_group()
        raise
    patches = ((mcore_patches.OPTIMIZER_PATCHES if cfg.cuda.fused_optimizer else ())
               + (mcore_patches.COMPILE_PATCHES if cfg.cuda.compile else ())
               + (mcore_patches.ACCUMULATION_PATCHES if cfg.cuda.compiled_grad_accumulation else ()))
    try:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=dims.tp,
                                                 pipeline_model_parallel_size=dims.pp,
                                                 virtual_pipeline_model_parallel_size=dims.vp if dims.vp > 1 else None,
                                                 context_parallel_size=dims.cp)
        torch.manual_seed(cfg.seed)
        model_parallel_cuda_manual_seed(cfg.seed)
        with mcore_patches.applied(patches), _deterministic(cfg.cuda.deterministic):
            yield Backend(name="cuda", device=torch.device("cuda", local_rank), dims=dims, rank=dist.get_rank(),
                          dp_rank=parallel_state.get_data_parallel_rank())
    finally:
        parallel_state.destroy_model_parallel()
        if owns_group:
            dist.destroy_process_group()
