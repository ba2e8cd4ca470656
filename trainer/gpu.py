"""The cuda engine: megatron-core's own training machinery on NVIDIA GPUs.

GPTModel in bf16 (Float16Module) inside megatron's DistributedDataParallel (fp32 main gradients in
contiguous buffers), megatron's distributed optimizer (ZeRO-1: fp32 main weights and Adam moments
sharded over data-parallel ranks), and megatron's forward-backward schedule, which accumulates
micro-batches and finalises gradients (reduce-scatter over dp, the tied embedding's two copies summed
over the first and last pipeline stages) once per step.  Tensor parallel through megatron's layers and
pipeline parallel through its 1F1B schedule (interleaved over `parallel.vp` model chunks per stage), as on
the cpu backend; `require_cuda_layout` refuses what is not wired in (context parallelism).

What makes it fast without Transformer Engine or Apex (each lever measured by bench/gpu_mfu.py):
- SDPA core attention (trainer/attention.py): flash/cuDNN kernels instead of an s×s score tensor;
- torch's fused AdamW kernel inside the distributed optimizer (megatron builds a plain torch AdamW
  when TE/Apex are absent), and multi-tensor norm and scale (trainer/mcore_patches.py) instead of a
  host sync per gradient tensor;
- torch.compile of each transformer layer (norms, activation, residual adds, RoPE fused);
- a compiled cross entropy (trainer/losses.py) that recomputes the softmax from the bf16 logits in backward;
- each micro-batch's loss divided by the global batch's tokens before backward, not the gradients after it;
- the DDP hook's fp32 += bf16 gradient accumulation as a compiled kernel (trainer/mcore_patches.py);
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
from megatron.core.utils import get_attr_wrapped_model

from conf import ConfigError
from trainer.backend import Backend
from trainer.checkpoint import CheckpointError
from trainer.config import TrainerConfig
from trainer.data import Batch
from trainer.downstream import model_log_probs
from trainer.engine import Check, StepResult, accept_all, from_last_stage, pipeline_log_probs
from trainer.losses import compile_language_model_loss, source_sums, token_losses
from trainer.model import build_model
from trainer.optim import build_scheduler
from trainer.parallel import ParallelDims, ParallelDimsError
from trainer.sharded_state import ShardedModel, ShardedRef
from trainer.shards import _whole_names


def _loss(batch: Batch, per_token: torch.Tensor, n_sources: int = 0):
    """megatron's three-value loss contract: (sum to backpropagate, tokens it covers, what to report).
    `per_token` is [2, b, s]: the cross entropy (reported) and the objective (backpropagated)."""
    ce, objective = per_token.float() * batch.loss_mask
    n = batch.loss_mask.sum()
    report = {"lm loss": torch.stack([ce.sum().detach(), n.detach()])}
    if n_sources:   # every micro-batch reports the same keys: the ranks then sum them alike
        report["by source"] = (source_sums(per_token[0], batch.loss_mask, batch.source_ids, n_sources)
                               if batch.source_ids is not None
                               else torch.zeros(n_sources, 2, dtype=torch.float64, device=ce.device))
    return objective.sum(), n.to(torch.int), report


def _forward_step(data_iterator, model, z_loss: float = 0.0, n_sources: int = 0):
    """megatron's forward_step_func: every stage reads the same micro-batch; a stage before the last hands its
    activations on (megatron sends them to the next stage), the last computes the losses."""
    batch: Batch = next(data_iterator)
    if not get_attr_wrapped_model(model, "post_process"):   # through megatron's DDP and Float16Module
        return model(batch.tokens, batch.position_ids, batch.attention_mask), None
    ce, objective = token_losses(model, batch, z_loss)
    return torch.stack([ce, objective]), partial(_loss, batch, n_sources=n_sources)


def _finalize_unscaled(model, num_tokens=None, **kwargs):
    """megatron's finalize_model_grads without its division of the whole fp32 gradient buffer by the token count
    (a pass over every gradient, and a host sync on the count): under `cuda.scale_loss_by_tokens` each micro-batch's
    loss was divided by the global count before its backward, as a hand-written trainer divides it."""
    return finalize_model_grads(model, None, **kwargs)


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


def _layout() -> dict[str, int]:
    """This run's model- and data-parallel sizes, which fix how the distributed optimizer slices its state."""
    return {"tp": parallel_state.get_tensor_model_parallel_world_size(),
            "pp": parallel_state.get_pipeline_model_parallel_world_size(),
            "dp": parallel_state.get_data_parallel_world_size()}


class DistributedOptimizerState:
    """Checkpoint part for megatron's distributed optimizer: its common state (param groups, step)
    and the parameter state (fp32 main weights, Adam moments) gathered on data-parallel rank 0.
    Only without model parallelism: rank 0 writes the gathered checkpoint, and under tp or pp its
    gather holds its own model-parallel rank's parameters (`require_cuda_layout` refuses that)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        layout = _layout()
        if layout["tp"] * layout["pp"] > 1:
            raise CheckpointError(f"the distributed optimizer's gathered state would hold one model-parallel rank's "
                                  f"share at tp={layout['tp']} pp={layout['pp']}; use schedule.checkpoint_format="
                                  "sharded")
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


class ShardedDistributedOptimizer(DistributedOptimizerState):
    """The distributed optimizer's state as each rank's own ZeRO-1 slices (fp32 main weights, Adam moments, step),
    written through torch.distributed.checkpoint without a gather, under
    `optimizer/<optimizer>/tp<t>.pp<p>.dp<d>/<parameter>/<tensor>` (the parameter by its whole-model name); the
    param groups' settings in `common.pt` (megatron matches them to each rank's groups by their kind).  Like
    megatron's `dp_reshardable` format it loads at the tensor-, pipeline- and data-parallel sizes that wrote it
    (at another, at tp=pp=1 resume from a gathered checkpoint).  Not yet run on a GPU."""

    def __init__(self, optimizer, gpt: torch.nn.Module):
        super().__init__(optimizer)
        whole = _whole_names(gpt)   # layers numbered over the whole model: stages' keys never collide
        self.names = {param: whole[name] for name, param in gpt.named_parameters()}

    def _slices(self):
        """(key prefix, megatron optimizer, model parameter) for each parameter this rank holds a slice of."""
        ps = parallel_state
        rank = (f"tp{ps.get_tensor_model_parallel_rank()}.pp{ps.get_pipeline_model_parallel_rank()}"
                f".dp{ps.get_data_parallel_rank()}")
        for index, opt in enumerate(_megatron_optimizers(self.optimizer)):
            for param in opt.model_param_group_index_map:
                yield f"optimizer/{index}/{rank}/{self.names[param]}", opt, param

    def sharded_state_dict(self, copy: bool = False) -> dict[str, torch.Tensor]:
        out = {}
        for key, opt, param in self._slices():
            for name, tensor in opt._get_main_param_and_optimizer_states(param).items():
                out[f"{key}/{name}"] = tensor.detach().clone() if copy else tensor
        return out

    def sharded_extra(self) -> dict[str, Any]:
        return {"common": self.optimizer.state_dict(), "layout": _layout()}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, ShardedRef):
            return super().load_state_dict(state)
        from torch.distributed.checkpoint import load

        written, layout = state.extra["layout"], _layout()
        if written != layout:
            at = lambda sizes: " ".join(f"{k}={v}" for k, v in sizes.items())   # noqa: E731
            raise CheckpointError(f"{state.path}: the distributed optimizer's slices were written at {at(written)} "
                                  f"and load only at those sizes (this run: {at(layout)}); resume at that layout, "
                                  "or (at tp=pp=1) from a checkpoint written with schedule.checkpoint_format=gathered")
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


def require_cuda_layout(cfg: TrainerConfig, dims: ParallelDims) -> None:
    """What the cuda engine runs: tensor, pipeline (1F1B, interleaved when parallel.vp > 1) and data parallelism.
    Checked by the cuda backend before megatron's process groups are set up, so a layout the engine cannot run
    fails with a message, not a hang or a wrong model."""
    if dims.cp > 1:
        raise ParallelDimsError(f"parallel.cp={dims.cp}: context parallelism needs Transformer Engine's attention "
                                "(megatron-core's local layers and trainer/attention.py's SDPA see whole sequences); "
                                "set parallel.cp=1")
    if dims.pp > 1:
        dims.require_model_split(cfg.model.num_layers)
        dims.require_interleavable(cfg.grad_accumulation)
    if dims.tp * dims.pp > 1 and cfg.schedule.checkpoint_format != "sharded":
        raise ConfigError(f"schedule.checkpoint_format={cfg.schedule.checkpoint_format} at tp={dims.tp} pp={dims.pp}: "
                          "the distributed optimizer's gathered state holds one model-parallel rank's share; set "
                          "schedule.checkpoint_format=sharded")


class CudaEngine:
    def __init__(self, cfg: TrainerConfig, backend: Backend, vocab_size: int):
        self.cfg, self.backend = cfg, backend   # a layout that require_cuda_layout passed (trainer/backend.py)
        bf16 = cfg.cuda.precision == "bf16"
        vp = backend.dims.vp
        # this rank's pipeline stage: one model, or under the interleaved schedule `vp` chunks (megatron's get_model)
        self.chunks = [build_model(cfg.model, vocab_size, cfg.cuda, vp_stage=i if vp > 1 else None).cuda(backend.device)
                       for i in range(vp)]
        for chunk in self.chunks if cfg.cuda.compile else ():
            for layer in chunk.decoder.layers:
                layer.compile()   # in place: parameter names and state_dict keys stay those of megatron
        for chunk in self.chunks if cfg.cuda.compile_loss else ():
            compile_language_model_loss(chunk)
        # what the checkpoint parts and the parameter counts read (state_dict keys "<chunk>.<name>" when interleaved)
        self.gpt = self.chunks[0] if vp == 1 else torch.nn.ModuleList(self.chunks)
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, use_distributed_optimizer=True,
            overlap_grad_reduce=cfg.cuda.overlap_grad_reduce and backend.dims.dp > 1)
        # one DDP per chunk, the later chunks' gradients in a single bucket, as megatron's get_model wraps them
        self.wrapped = [DistributedDataParallel(config=chunk.config, ddp_config=ddp_config,
                                                module=Float16Module(chunk.config, chunk) if bf16 else chunk,
                                                disable_bucketing=index > 0)
                        for index, chunk in enumerate(self.chunks)]
        self.model = self.wrapped[0]
        o = cfg.optim
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=o.lr, min_lr=o.min_lr, weight_decay=o.weight_decay,
                            adam_beta1=o.beta1, adam_beta2=o.beta2, adam_eps=o.eps, clip_grad=o.grad_clip,
                            bf16=bf16, params_dtype=self.chunks[0].config.params_dtype, use_distributed_optimizer=True),
            self.wrapped)
        if cfg.cuda.fused_optimizer:
            use_fused_adamw(self.optimizer)
        self.scheduler = build_scheduler(self.optimizer, o, cfg.schedule.steps)
        self.inverse_tokens: torch.Tensor | None = None   # 1 / the global batch's tokens, set by each step
        for chunk in self.chunks:
            config = chunk.config
            config.no_sync_func = [m.no_sync for m in self.wrapped] if vp > 1 else self.model.no_sync
            if cfg.cuda.scale_loss_by_tokens:
                config.finalize_model_grads_func = _finalize_unscaled
                config.grad_scale_func = self._scale_loss
            else:
                config.finalize_model_grads_func = finalize_model_grads
                config.grad_scale_func = self.optimizer.scale_loss
        self.forward_backward = get_forward_backward_func()

    def parts(self) -> dict[str, Any]:
        """Sharded or gathered, as `schedule.checkpoint_format` says (trainer/checkpoint.py); either loads."""
        return {"model": ShardedModel(self.gpt),
                "optimizer": ShardedDistributedOptimizer(self.optimizer, self.gpt), "scheduler": self.scheduler}

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def _run(self, batches: list[Batch], forward_only: bool) -> float:
        """The global batch's mean cross entropy per token, the same on every rank."""
        total = self._totals(self._reports(batches, forward_only), "lm loss", (2,), torch.float32)
        return (total[0] / total[1]).item()

    def _totals(self, reports: list[dict], key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """`key` summed over this step's micro-batches (the last pipeline stage holds them; megatron's schedule
        returns nothing on the others), then over the data-parallel ranks: on every rank, so that all take the
        same decision on a bad step."""
        total = (torch.stack([r[key] for r in reports]).sum(0).to(dtype) if reports
                 else torch.zeros(shape, dtype=dtype, device=self.backend.device))
        if self.backend.dims.pp > 1:
            from_last_stage(total)
        if self.backend.dims.dp > 1:
            torch.distributed.all_reduce(total, group=parallel_state.get_data_parallel_group())
        return total

    def _reports(self, batches: list[Batch], forward_only: bool, n_sources: int = 0) -> list[dict]:
        interleaved = len(self.wrapped) > 1   # megatron's interleaved schedule: a model and a data iterator per chunk
        return self.forward_backward(
            forward_step_func=partial(_forward_step, z_loss=self.cfg.optim.z_loss, n_sources=n_sources),
            data_iterator=[iter(batches) for _ in self.wrapped] if interleaved else iter(batches),
            model=self.wrapped if interleaved else self.model,
            num_microbatches=len(batches), seq_length=self.cfg.model.seq_length,
            micro_batch_size=self.cfg.batch.micro_batch_size, decoder_seq_length=self.cfg.model.seq_length,
            forward_only=forward_only)

    def _scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss each micro-batch backpropagates, already divided by the global batch's token count."""
        return self.optimizer.scale_loss(loss) * self.inverse_tokens

    def _count_tokens(self, batches: list[Batch]) -> None:
        """The global batch's loss tokens, on the device (no host sync): every pipeline stage reads the same
        micro-batches, so each counts them alike; summed over the data-parallel ranks."""
        tokens = torch.stack([b.loss_mask.sum() for b in batches]).sum().to(torch.float32)
        if self.backend.dims.dp > 1:
            torch.distributed.all_reduce(tokens, group=parallel_state.get_data_parallel_group())
        self.inverse_tokens = 1.0 / tokens.clamp(min=1.0)

    def step(self, batches: list[Batch], check: Check = accept_all) -> StepResult:
        began = time.perf_counter()
        if self.cfg.cuda.scale_loss_by_tokens:
            self._count_tokens(batches)
        for model in self.wrapped:
            model.zero_grad_buffer()
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
        """Downstream scoring (trainer/downstream.py): one forward pass per micro-batch (under tensor parallelism
        megatron's vocabulary-parallel cross entropy gives every rank the whole log-probabilities), or through the
        pipeline as the cpu engine scores."""
        if self.backend.dims.pp > 1:
            return pipeline_log_probs(self.forward_backward, self.wrapped, batches, self.cfg, self.backend)
        return model_log_probs(self.gpt, self.backend.device)(batches)

    @torch.no_grad()
    def evaluate(self, batches: list[Batch], n_sources: int = 0) -> tuple[float, torch.Tensor | None]:
        """Validation cross entropy per token, and per source [n_sources, 2] (loss sum, tokens) when asked, over
        every data-parallel rank's share of the validation batches (as the cpu engine's)."""
        for model in self.wrapped:
            model.eval()
        try:
            reports = self._reports(batches, forward_only=True, n_sources=n_sources)
        finally:
            for model in self.wrapped:
                model.train()
        total = self._totals(reports, "lm loss", (2,), torch.float64)
        by_source = self._totals(reports, "by source", (n_sources, 2), torch.float64).cpu() if n_sources else None
        return (total[0] / total[1]).item(), by_source
