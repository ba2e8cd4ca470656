"""The cuda engine: megatron-core's own training machinery on NVIDIA GPUs.

GPTModel in bf16 (Float16Module) inside megatron's DistributedDataParallel (fp32 main gradients in
contiguous buffers), megatron's distributed optimizer (ZeRO-1: fp32 main weights and Adam moments
sharded over data-parallel ranks), and megatron's forward-backward schedule, which accumulates
micro-batches and finalises gradients (reduce-scatter over dp) once per step.

What makes it fast without Transformer Engine or Apex (each lever measured by bench/gpu_mfu.py):
- SDPA core attention (trainer/attention.py): flash/cuDNN kernels instead of an s×s score tensor;
- torch's fused AdamW kernel inside the distributed optimizer (megatron builds a plain torch AdamW
  when TE/Apex are absent), and multi-tensor norm and scale (trainer/mcore_patches.py) instead of a
  host sync per gradient tensor;
- torch.compile of each transformer layer (norms, activation, residual adds, RoPE fused);
- batches prepared and pinned ahead by trainer/loader.py.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any, Sequence

import torch
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer.clip_grads import clip_grad_by_total_norm_fp32
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.transformer.module import Float16Module

from conf import ConfigError
from trainer.backend import Backend
from trainer.checkpoint import CheckpointError
from trainer.config import TrainerConfig
from trainer.data import Batch
from trainer.downstream import model_log_probs
from trainer.engine import Check, StepResult, accept_all
from trainer.losses import source_sums, token_losses
from trainer.model import build_model
from trainer.optim import build_scheduler
from trainer.sharded_state import ShardedRef


def _loss(batch: Batch, per_token: torch.Tensor, n_sources: int = 0):
    """megatron's three-value loss contract: (sum to backpropagate, tokens it covers, what to report).
    `per_token` is [2, b, s]: the cross entropy (reported) and the objective (backpropagated)."""
    ce, objective = per_token.float() * batch.loss_mask
    n = batch.loss_mask.sum()
    report = {"lm loss": torch.stack([ce.sum().detach(), n.detach()])}
    if n_sources and batch.source_ids is not None:
        report["by source"] = source_sums(per_token[0], batch.loss_mask, batch.source_ids, n_sources)
    return objective.sum(), n.to(torch.int), report


def _forward_step(data_iterator, model, z_loss: float = 0.0, n_sources: int = 0):
    batch: Batch = next(data_iterator)
    ce, objective = token_losses(model, batch, z_loss)
    return torch.stack([ce, objective]), partial(_loss, batch, n_sources=n_sources)


def use_fused_adamw(optimizer) -> int:
    """Switch the torch AdamW inside each of megatron's optimizers to torch's fused CUDA kernel.

    megatron-core builds `torch.optim.AdamW(params, ...)` when neither TE nor Apex is installed, which
    runs as foreach kernels launched from Python; `fused=True` is one kernel per dtype/device group.
    The flag is read at every step, so setting it on the groups before the first step is enough.
    Returns how many param groups now run fused.
    """
    count = 0
    for inner in _inner_optimizers(optimizer):
        if not isinstance(inner, torch.optim.AdamW):
            raise TypeError(f"expected megatron to wrap torch.optim.AdamW, found {type(inner).__name__}")
        inner.defaults.update(fused=True, foreach=False)
        for group in inner.param_groups:
            group.update(fused=True, foreach=False)
            count += 1
    return count


def _megatron_optimizers(optimizer) -> list:
    return list(getattr(optimizer, "chained_optimizers", [optimizer]))


def _inner_optimizers(optimizer) -> list[torch.optim.Optimizer]:
    return [opt.optimizer for opt in _megatron_optimizers(optimizer)]


class DistributedOptimizerState:
    """Checkpoint part for megatron's distributed optimizer: its common state (param groups, step)
    and the parameter state (fp32 main weights, Adam moments) gathered on data-parallel rank 0."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        return {"common": self.optimizer.state_dict(),
                "params": [opt.get_parameter_state_dp_zero() for opt in _megatron_optimizers(self.optimizer)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["common"])
        for opt, params in zip(_megatron_optimizers(self.optimizer), state["params"]):
            inner = opt.optimizer
            # megatron 0.16.1 with torch's AdamW: load_state_dict gives every parameter one shared `step`
            # tensor, and load_parameter_state_from_dp_zero then copies every state key, `step` included,
            # from a file that never holds it (KeyError). Set the steps aside, load, and give each its own.
            steps = {p: s.pop("step") for p, s in inner.state.items() if "step" in s}
            opt.load_parameter_state_from_dp_zero(params)
            for p, step in steps.items():
                inner.state[p]["step"] = step.clone()


class CudaShardedModel:
    """Checkpoint part for the cuda engine's model: whole (`state_dict`, the gathered format) or written through
    torch.distributed.checkpoint under the cpu backend's keys, `model/<name>` (tp=pp=1 here: every rank holds the
    whole model, which DCP writes once).  Not yet run on a GPU: bench/gpu_mfu.py's resume check saves and
    restores it."""

    def __init__(self, model: torch.nn.Module, gpt: torch.nn.Module):
        self.model, self.gpt = model, gpt   # megatron's DDP (what trains), and the GPTModel inside it

    def state_dict(self) -> dict[str, Any]:
        return self.model.state_dict()

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.gpt.state_dict().items() if torch.is_tensor(v)}   # _extra_state is None

    def sharded_state_dict(self, copy: bool = False) -> dict[str, torch.Tensor]:
        return {f"model/{k}": v.detach().clone() if copy else v for k, v in self._tensors().items()}

    def sharded_extra(self) -> dict[str, Any]:
        return {"names": list(self.gpt.state_dict())}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, ShardedRef):
            return self.model.load_state_dict(state)
        from torch.distributed.checkpoint import load

        template = {f"model/{k}": torch.empty_like(v) for k, v in self._tensors().items()}
        load(template, checkpoint_id=state.path)
        self.gpt.load_state_dict({k: template.get(f"model/{k}", v) for k, v in self.gpt.state_dict().items()})


class ShardedDistributedOptimizer(DistributedOptimizerState):
    """The distributed optimizer's state as each data-parallel rank's own ZeRO-1 slices (fp32 main weights, Adam
    moments, step), written through torch.distributed.checkpoint without a gather, under
    `optimizer/<optimizer>/dp<rank>/<parameter>/<tensor>`; the param groups' settings in `common.pt`.  Like
    megatron's `dp_reshardable` format it loads at the data-parallel size that wrote it (at another, resume from
    a gathered checkpoint).  The gathered format (the parent's) stays.  Not yet run on a GPU."""

    def __init__(self, optimizer, gpt: torch.nn.Module):
        super().__init__(optimizer)
        self.names = {param: name for name, param in gpt.named_parameters()}

    def _slices(self):
        """(key prefix, megatron optimizer, model parameter) for each parameter this rank holds a slice of."""
        dp_rank = parallel_state.get_data_parallel_rank()
        for index, opt in enumerate(_megatron_optimizers(self.optimizer)):
            for param in opt.model_param_group_index_map:
                yield f"optimizer/{index}/dp{dp_rank}/{self.names[param]}", opt, param

    def sharded_state_dict(self, copy: bool = False) -> dict[str, torch.Tensor]:
        out = {}
        for key, opt, param in self._slices():
            for name, tensor in opt._get_main_param_and_optimizer_states(param).items():
                out[f"{key}/{name}"] = tensor.detach().clone() if copy else tensor
        return out

    def sharded_extra(self) -> dict[str, Any]:
        return {"common": self.optimizer.state_dict(), "dp": parallel_state.get_data_parallel_world_size()}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, ShardedRef):
            return super().load_state_dict(state)
        from torch.distributed.checkpoint import load

        dp = parallel_state.get_data_parallel_world_size()
        if state.extra["dp"] != dp:
            raise CheckpointError(f"{state.path}: the distributed optimizer's slices were written at dp="
                                  f"{state.extra['dp']}, and load only at that data-parallel size (this run: dp={dp}); "
                                  "resume at that size, or from a checkpoint written with "
                                  "schedule.checkpoint_format=gathered")
        self.optimizer.load_state_dict(state.extra["common"])   # allocates the state tensors the slices fill
        slices = list(self._slices())
        template = {f"{key}/{name}": torch.empty_like(tensor) for key, opt, param in slices
                    for name, tensor in opt._get_main_param_and_optimizer_states(param).items()}
        load(template, checkpoint_id=state.path)
        for key, opt, param in slices:
            names = opt._get_main_param_and_optimizer_states(param)
            opt._set_main_param_and_optimizer_states(param, {n: template[f"{key}/{n}"] for n in names})
        for inner in _inner_optimizers(self.optimizer):
            # megatron 0.16.1's load_state_dict gives every parameter one shared `step` tensor (filled above with the
            # same value each time), which torch's AdamW would then advance once per parameter: each gets its own
            for param_state in inner.state.values():
                if "step" in param_state:
                    param_state["step"] = param_state["step"].clone()


class CudaEngine:
    def __init__(self, cfg: TrainerConfig, backend: Backend, vocab_size: int):
        if backend.dims.tp * backend.dims.pp > 1:
            # Its checkpoints would hold rank 0's shard only: whole-state saving across model-parallel ranks
            # (megatron's dist_checkpointing) is not wired in yet. Data parallelism is.
            raise ConfigError(f"the cuda backend trains tp=pp=1 (any dp) for now, got tp={backend.dims.tp} "
                              f"pp={backend.dims.pp}: its checkpoints cannot yet gather model-parallel shards")
        self.cfg, self.backend = cfg, backend
        bf16 = cfg.cuda.precision == "bf16"
        gpt = build_model(cfg.model, vocab_size, cfg.cuda).cuda(backend.device)
        self.gpt = gpt
        if cfg.cuda.compile:
            for layer in gpt.decoder.layers:
                layer.compile()   # in place: parameter names and state_dict keys stay those of megatron
        wrapped = Float16Module(gpt.config, gpt) if bf16 else gpt
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, use_distributed_optimizer=True,
            overlap_grad_reduce=cfg.cuda.overlap_grad_reduce and backend.dims.dp > 1)
        self.model = DistributedDataParallel(config=gpt.config, ddp_config=ddp_config, module=wrapped)
        o = cfg.optim
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=o.lr, min_lr=o.min_lr, weight_decay=o.weight_decay,
                            adam_beta1=o.beta1, adam_beta2=o.beta2, adam_eps=o.eps, clip_grad=o.grad_clip,
                            bf16=bf16, params_dtype=gpt.config.params_dtype, use_distributed_optimizer=True),
            [self.model])
        if cfg.cuda.fused_optimizer:
            use_fused_adamw(self.optimizer)
        self.scheduler = build_scheduler(self.optimizer, o, cfg.schedule.steps)
        config = gpt.config
        config.no_sync_func = self.model.no_sync
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = self.optimizer.scale_loss
        self.forward_backward = get_forward_backward_func()

    def parts(self) -> dict[str, Any]:
        """Sharded or gathered, as `schedule.checkpoint_format` says (trainer/checkpoint.py); either loads."""
        return {"model": CudaShardedModel(self.model, self.gpt),
                "optimizer": ShardedDistributedOptimizer(self.optimizer, self.gpt), "scheduler": self.scheduler}

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def _run(self, batches: list[Batch], forward_only: bool) -> float:
        reports = self._reports(batches, forward_only)
        total = torch.stack([r["lm loss"] for r in reports]).sum(0)
        return (total[0] / total[1]).item()

    def _reports(self, batches: list[Batch], forward_only: bool, n_sources: int = 0) -> list[dict]:
        return self.forward_backward(
            forward_step_func=partial(_forward_step, z_loss=self.cfg.optim.z_loss, n_sources=n_sources),
            data_iterator=iter(batches), model=self.model,
            num_microbatches=len(batches), seq_length=self.cfg.model.seq_length,
            micro_batch_size=self.cfg.batch.micro_batch_size, decoder_seq_length=self.cfg.model.seq_length,
            forward_only=forward_only)

    def step(self, batches: list[Batch], check: Check = accept_all) -> StepResult:
        began = time.perf_counter()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        loss = self._run(batches, forward_only=False)     # .item() waits for the backward pass
        backward_done = time.perf_counter()
        with torch.no_grad():
            reason, grad_norm = self._update(loss, check)
        torch.cuda.synchronize()
        return StepResult(loss, grad_norm, {"forward_backward": backward_done - began,
                                            "optimizer": time.perf_counter() - backward_done}, reason)

    def _update(self, loss: float, check: Check) -> tuple[str | None, float]:
        """ChainedOptimizer.step's own sequence, opened up: it has no hook between the norm and the update."""
        found_inf = self.optimizer.prepare_grads()
        grad_norm = float("inf") if found_inf else float(self.optimizer.get_grad_norm())
        reason = check(loss, grad_norm)
        if reason is None:
            clip = self.cfg.optim.grad_clip
            for opt in _megatron_optimizers(self.optimizer):
                if clip > 0 and opt.get_parameters():
                    clip_grad_by_total_norm_fp32(opt.get_parameters(), max_norm=clip, total_norm=grad_norm)
            self.scheduler.step(1)                         # the same lr convention as the cpu engine
            self.optimizer.step_with_ready_grads()
        return reason, grad_norm

    def token_log_probs(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        """Downstream scoring (trainer/downstream.py): tp=pp=1 here, so one forward pass per micro-batch."""
        return model_log_probs(self.gpt, self.backend.device)(batches)

    @torch.no_grad()
    def evaluate(self, batches: list[Batch], n_sources: int = 0) -> tuple[float, torch.Tensor | None]:
        """Validation cross entropy per token, and per source [n_sources, 2] (loss sum, tokens) when asked
        (on this rank's share of the validation batches)."""
        self.model.eval()
        try:
            reports = self._reports(batches, forward_only=True, n_sources=n_sources)
        finally:
            self.model.train()
        total = torch.stack([r["lm loss"] for r in reports]).sum(0)
        by_source = (torch.stack([r["by source"] for r in reports]).sum(0).cpu()
                     if n_sources and reports and "by source" in reports[0] else None)
        return (total[0] / total[1]).item(), by_source
