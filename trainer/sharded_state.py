"""Checkpoint parts that each rank saves and loads as its own shards (torch.distributed.checkpoint).

A tensor-parallel parameter becomes a DTensor over megatron's tensor-parallel group, sharded along the
dimension megatron split it (`partition_dim`); everything else is a plain tensor that DCP writes once
however many ranks replicate it.  Keys are the whole model's names (layers numbered globally, a tied
embedding once: trainer/shards.py), so DCP reads each rank's slice of its stage at any tp/pp/dp layout.
AdamW's moments are sharded like their parameters, under `optimizer/<parameter>/<moment>`.
(megatron-core's dist_checkpointing writes the same kind of files but cannot save on a CPU: its
filesystem writer calls torch.cuda.synchronize; DCP is what its torch_dist backend writes through.)

The parts keep `state_dict()`/`load_state_dict()` of the whole state (gathered), so a run can still
write and read the gathered format.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

from trainer.shards import WholeModel, WholeOptimizer, _is_tied_copy, _stages, _whole_names, in_model_order

MOMENTS = ("exp_avg", "exp_avg_sq", "step")


@dataclass(frozen=True)
class ShardedRef:
    """What a sharded checkpoint's payload holds for a sharded part: where its shards are (small enough to
    broadcast; every rank then reads its own slices)."""
    path: str
    part: str
    extra: Any = None    # what the part needs besides its shards (the optimizer: its param groups' settings)


def _tp_mesh(model: torch.nn.Module) -> DeviceMesh | None:
    """megatron's tensor-parallel group as a mesh on the device the model is on (gloo on the cpu, NCCL on cuda)."""
    group = parallel_state.get_tensor_model_parallel_group()
    if dist.get_world_size(group) == 1:
        return None
    return DeviceMesh.from_group(group, next(model.parameters()).device.type)


def _placed(local: torch.Tensor, dim: int | None, mesh: DeviceMesh | None) -> torch.Tensor:
    """`local` as DCP should see it: a DTensor slice of the whole tensor, or the tensor itself."""
    if mesh is None or dim is None or local.dim() == 0:
        return local
    shape = list(local.shape)
    shape[dim] *= mesh.size()
    whole = torch.Size(shape)
    return DTensor.from_local(local, mesh, [Shard(dim)], run_check=False, shape=whole,
                              stride=torch.empty(whole, device="meta").stride())


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


class ShardedModel(WholeModel):
    """The model's state: whole (`state_dict`) or as this rank's shards (`sharded_state_dict`)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__(model)
        self.whole_names = _whole_names(model)
        self.mesh = _tp_mesh(model)

    def sharded_state_dict(self, copy: bool = False) -> dict[str, torch.Tensor]:
        """`model/<whole name>` -> this rank's tensor (DTensor when tensor-parallel); `copy` detaches a snapshot
        that training may not change (an asynchronous save writes it while the next steps run)."""
        out = {}
        for key, value in self.model.state_dict().items():
            whole = self.whole_names[key]
            if not torch.is_tensor(value) or _is_tied_copy(key, whole):   # _extra_state is None on the local spec
                continue
            out[f"model/{whole}"] = _placed(value.detach().clone() if copy else value, self.split.get(key), self.mesh)
        return out

    def sharded_extra(self) -> dict[str, Any]:
        """The whole model's keys in one process's order (those that hold no tensor too), to read it back whole."""
        mine = [self.whole_names[k] for k in self.model.state_dict() if not _is_tied_copy(k, self.whole_names[k])]
        return {"names": in_model_order(k for stage in _stages(mine) for k in stage) if self.names is not None
                else mine}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, ShardedRef):
            return super().load_state_dict(state)
        from torch.distributed.checkpoint import load

        current = self.model.state_dict()
        template = {f"model/{self.whole_names[k]}": _placed(torch.empty_like(v), self.split.get(k), self.mesh)
                    for k, v in current.items() if torch.is_tensor(v)}
        load(template, checkpoint_id=state.path)
        self.model.load_state_dict({k: _local(template[f"model/{self.whole_names[k]}"]) if torch.is_tensor(v) else v
                                    for k, v in current.items()})


class ShardedOptimizer(WholeOptimizer):
    """torch AdamW's state: whole (`state_dict`) or as this rank's shards, each moment placed as its parameter."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module):
        super().__init__(optimizer, model)
        self.names = _whole_names(model)
        self.mesh = _tp_mesh(model)
        self.whole_order = self.whole or [self.names[n] for n in self.local]   # state index -> whole name

    def _key(self, index: int, moment: str) -> str:
        return f"optimizer/{self.whole_order[index]}/{moment}"

    def _tied(self, index: int) -> bool:
        return _is_tied_copy(self.local[index], self.whole_order[index])

    def sharded_state_dict(self, copy: bool = False) -> dict[str, torch.Tensor]:
        out = {}
        for index, state in self.optimizer.state_dict()["state"].items():
            if self._tied(index):   # the last stage's copy of a tied embedding: the same moments as the first's
                continue
            for moment, value in state.items():
                if torch.is_tensor(value):
                    value = value.detach().clone() if copy else value
                    out[self._key(index, moment)] = _placed(value, self.dims[index], self.mesh)
        return out

    def sharded_extra(self) -> dict[str, Any]:
        """What the shards do not hold: the param groups' settings (lr, betas, weight decay..., the same on every
        rank) and their parameters' whole names in one process's order (to read the state back whole)."""
        groups = self.optimizer.state_dict()["param_groups"]
        names = (self._whole_groups(groups) if self.whole is not None
                 else [[self.whole_order[i] for i in g["params"]] for g in groups])
        return {"groups": [{k: v for k, v in g.items() if k != "params"} for g in groups], "names": names}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, ShardedRef):
            return super().load_state_dict(state)
        from torch.distributed.checkpoint import FileSystemReader, load

        stored = FileSystemReader(state.path).read_metadata().state_dict_metadata
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        template = {}
        for index, param in enumerate(params):
            for moment in MOMENTS:
                if self._key(index, moment) in stored:   # a parameter that never had a gradient has no moments
                    like = torch.zeros((), dtype=torch.float32) if moment == "step" else torch.empty_like(param)
                    template[self._key(index, moment)] = _placed(like, self.dims[index], self.mesh)
        load(template, checkpoint_id=state.path)
        local = self.optimizer.state_dict()
        moments: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in template.items():
            _, name, moment = key.rsplit("/", 2)
            for index in (i for i, whole in enumerate(self.whole_order) if whole == name):
                moments.setdefault(index, {})[moment] = _local(value).clone()
        groups = state.extra["groups"]
        self.optimizer.load_state_dict({"state": moments,
                                        "param_groups": [dict(saved, params=mine["params"])
                                                         for saved, mine in zip(groups, local["param_groups"])]})
