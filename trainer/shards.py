"""Whole (unsharded) state from tensor- and pipeline-parallel shards, and shards from whole state.

On the cpu backend a checkpoint holds the whole model and optimizer state, gathered over the
tensor-parallel group and then over the pipeline stages before rank 0 writes it; on load each rank
takes its slice of its stage.  So a checkpoint written at one tensor/pipeline/data-parallel layout
resumes at another.  megatron marks every sharded parameter with `tensor_model_parallel` and its
`partition_dim`; everything else is replicated.  A stage numbers its layers from 0 (megatron keeps
the global number in `layer_number`), and the last stage holds a copy of a tied embedding: the
whole state names layers globally and holds the tied embedding once, as one process's model does.
(megatron-core's own dist_checkpointing does this for the cuda backend's layouts, but cannot save
on a CPU: its filesystem writer calls torch.cuda.synchronize.)
"""
from __future__ import annotations

import re
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


STAGE_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
TIED_COPY, EMBEDDING = "output_layer.weight", "embedding.word_embeddings.weight"


def _pp() -> tuple[int, Any]:
    group = parallel_state.get_pipeline_model_parallel_group()
    return dist.get_world_size(group), group


def _whole_names(model: torch.nn.Module) -> dict[str, str]:
    """This stage's state_dict keys -> the whole model's: layers renumbered from the stage's first layer, the
    last stage's copy of a tied embedding named as the embedding."""
    if isinstance(model, torch.nn.ModuleList):   # the interleaved schedule's model chunks: keys "<chunk>.<name>"
        return {f"{i}.{key}": whole for i, chunk in enumerate(model) for key, whole in _whole_names(chunk).items()}
    layers = model.decoder.layers
    offset = layers[0].layer_number - 1 if len(layers) else 0

    def whole(key: str) -> str:
        found = STAGE_LAYER.match(key)
        return f"decoder.layers.{int(found.group(1)) + offset}.{key[found.end():]}" if found else key

    names = {key: whole(key) for key in model.state_dict(keep_vars=True)}
    if getattr(model, "share_embeddings_and_output_weights", False) and not model.pre_process and TIED_COPY in names:
        names[TIED_COPY] = EMBEDDING
    return names


def _is_tied_copy(local: str, whole: str) -> bool:
    return whole == EMBEDDING and local.endswith(TIED_COPY)


def _model_order(whole: str) -> tuple[int, int]:
    """Where a whole-model name sits in one process's model: embeddings, the layers by number, the rest (final
    norm, output layer).  Stages concatenated are already in this order; interleaved chunks are not."""
    found = STAGE_LAYER.match(whole)
    return (1, int(found.group(1))) if found else (0 if whole.startswith("embedding.") else 2, 0)


def in_model_order(names: Any) -> list[str]:
    return sorted(names, key=_model_order)   # stable: a layer's own names keep their order


def _stages(mine: Any) -> list[Any]:
    """`mine` from every pipeline stage, in stage order (every rank of the stage's group calls it)."""
    size, group = _pp()
    every: list[Any] = [None] * size
    dist.all_gather_object(every, mine, group=group)
    return every


class WholeModel:
    """Checkpoint part: the model's state as if it had never been split (every rank calls state_dict)."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.split = model, _sharding(model)
        self.names = _whole_names(model) if _pp()[0] > 1 else None

    def state_dict(self) -> dict[str, Any]:
        state = self.model.state_dict()
        if _tp()[0] > 1:
            state = {k: _gather(v, self.split[k]) if k in self.split else v for k, v in state.items()}
        if self.names is None:
            return state
        mine = {self.names[k]: v for k, v in state.items() if not _is_tied_copy(k, self.names[k])}
        whole = {k: v for stage in _stages(mine) for k, v in stage.items()}
        return {k: whole[k] for k in in_model_order(whole)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.names is not None:
            state = {k: state[self.names[k]] for k in self.names}
        if _tp()[0] > 1:
            state = {k: _slice(v, self.split[k]) if k in self.split else v for k, v in state.items()}
        self.model.load_state_dict(state)


class WholeOptimizer:
    """Checkpoint part: torch AdamW's state with every moment tensor gathered like its parameter, and under
    pipeline parallelism the stages' states numbered as one process's optimizer numbers them."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module):
        split = _sharding(model)
        names = {id(p): n for n, p in model.named_parameters()}
        order = [p for group in optimizer.param_groups for p in group["params"]]
        self.optimizer = optimizer
        self.dims = {i: split.get(names[id(p)]) for i, p in enumerate(order)}   # state index -> split dim
        whole = _whole_names(model) if _pp()[0] > 1 else None
        self.local = [names[id(p)] for p in order]                                # state index -> local name
        self.whole = [whole[n] for n in self.local] if whole else None            # state index -> whole name

    def _each(self, state: dict[str, Any], fn) -> dict[str, Any]:
        out = dict(state)
        out["state"] = {i: {k: fn(v, self.dims[i]) if torch.is_tensor(v) and v.dim() > 0 and self.dims[i] is not None
                            else v for k, v in s.items()} for i, s in state["state"].items()}
        return out

    def _whole_groups(self, groups: list[dict[str, Any]]) -> list[list[str]]:
        """Per param group, the whole model's parameter names in one process's order (stage after stage)."""
        mine = [[self.whole[i] for i in g["params"] if not _is_tied_copy(self.local[i], self.whole[i])]
                for g in groups]
        stages = _stages(mine)
        return [in_model_order(name for stage in stages for name in stage[g]) for g in range(len(groups))]

    def state_dict(self) -> dict[str, Any]:
        state = self.optimizer.state_dict()
        if _tp()[0] > 1:
            state = self._each(state, _gather)
        if self.whole is None:
            return state
        groups = self._whole_groups(state["param_groups"])
        mine = {self.whole[i]: s for i, s in state["state"].items()
                if not _is_tied_copy(self.local[i], self.whole[i])}
        by_name = {k: v for stage in _stages(mine) for k, v in stage.items()}
        index = {name: i for i, name in enumerate(name for g in groups for name in g)}
        return {"state": {index[name]: s for name, s in by_name.items()},
                "param_groups": [dict(g, params=[index[n] for n in names])
                                 for g, names in zip(state["param_groups"], groups)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.whole is not None:
            local = self.optimizer.state_dict()["param_groups"]
            index = {name: i for i, name in enumerate(name for g in self._whole_groups(local) for name in g)}
            state = {"state": {i: state["state"][index[name]] for i, name in enumerate(self.whole)
                               if index[name] in state["state"]},
                     "param_groups": [dict(whole, params=mine["params"])
                                      for whole, mine in zip(state["param_groups"], local)]}
        self.optimizer.load_state_dict(state if _tp()[0] == 1 else self._each(state, _slice))
