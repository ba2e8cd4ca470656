"""Where the model runs: process groups, megatron's parallel state, RNG streams, and the device.

`open_backend(cfg)` is a context manager so several runs can share one Python process (tests):
everything it sets up, it tears down.
"""
from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from conf import ConfigError
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
        raise ConfigError("backend 'cuda' is not implemented yet (the GPU backend is a later issue: megatron DDP, "
                          "distributed optimizer, dist_checkpointing); run with -o backend=cpu")
    if cfg.backend != "cpu":
        raise ConfigError(f"unknown backend {cfg.backend!r}; known: cpu (cuda is a later issue)")
    from trainer.cpu import apply_cpu_patches, seed_cpu_rng_tracker

    owns_group = not dist.is_initialized()
    if owns_group:
        # World size 1 on a free loopback port: gloo needs a rendezvous even for one process.
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    dims = ParallelDims(tp=cfg.parallel.tp, pp=cfg.parallel.pp, cp=cfg.parallel.cp, dp=cfg.parallel.dp,
                        world_size=dist.get_world_size())
    try:
        dims.require_single_device("cpu")
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=dims.tp,
                                                 pipeline_model_parallel_size=dims.pp,
                                                 context_parallel_size=dims.cp)
        apply_cpu_patches()
        torch.manual_seed(cfg.seed)
        seed_cpu_rng_tracker(cfg.seed)
        yield Backend(name="cpu", device=torch.device("cpu"), dims=dims, rank=dist.get_rank(),
                      dp_rank=parallel_state.get_data_parallel_rank())
    finally:
        parallel_state.destroy_model_parallel()
        if owns_group:
            dist.destroy_process_group()
