"""Whole (unsharded) state from tensor-parallel shards, and shards from whole state.

On the cpu backend a checkpoint holds the whole model and optimizer state, gathered over the
tensor-parallel group before rank 0 writes it; on load each rank takes its slice.  So a checkpoint
written at one tensor/data-parallel layout resumes at another.  megatron marks every sharded
parameter with `tensor_model_parallel` and its `partition_dim`; everything else is replicated.
(megatron-core's own dist_checkpointing does this for the cuda backend's layouts, but cannot save
on a CPU: its filesystem writer calls torch.cuda.synchronize.)
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state


def _tp() -> tuple[int, int, Any]:
    group = parallel_state.get_tensor_model_parallel_group()
    return dist.get_world_size(group), dist.get_rank(group), group


def _sharding(model: torch.nn.Module) -> dict[str, int]:
    """Parameter name -> the dimension megatron split it along, for the tensor-parallel ones."""
    return {name: p.partition_dim for name, p in model.named_parameters()
            if getattr(p, "tensor_model_parallel", False)}


def _gather(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    size, _, group = _tp()
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _slice(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    size, rank, _ = _tp()
    return tensor.chunk(size, dim=dim)[rank].clone()


class WholeModel:
    """Checkpoint part: the model's state as if it had never been split (every rank calls state_dict)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.split = model, _sharding(model)

    def state_dict(self) -> dict[str, Any]:
        state = self.model.state_dict()
        if _tp()[0] == 1:
            return state
        return {k: _gather(v, self.split[k]) if k in self.split else v for k, v in state.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if _tp()[0] > 1:
            state = {k: _slice(v, self.split[k]) if k in self.split else v for k, v in state.items()}
        self.model.load_state_dict(state)


class WholeOptimizer:
    """Checkpoint part: torch AdamW's state with every moment tensor gathered like its parameter."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module):
        split = _sharding(model)
        names = {id(p): n for n, p in model.named_parameters()}
        order = [p for group in optimizer.param_groups for p in group["params"]]
        self.optimizer = optimizer
        self.dims = {i: split.get(names[id(p)]) for i, p in enumerate(order)}   # state index -> split dim

    def _each(self, state: dict[str, Any], fn) -> dict[str, Any]:
        out = dict(state)
        out["state"] = {i: {k: fn(v, self.dims[i]) if torch.is_tensor(v) and v.dim() > 0 and self.dims[i] is not None
                            else v for k, v in s.items()} for i, s in state["state"].items()}
        return out

    def state_dict(self) -> dict[str, Any]:
        state = self.optimizer.state_dict()
        return state if _tp()[0] == 1 else self._each(state, _gather)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state if _tp()[0] == 1 else self._each(state, _slice))
