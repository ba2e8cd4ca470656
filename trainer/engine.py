"""One optimizer step on a backend: the model, its optimizer and schedule, and how a global batch
becomes an update.  `build_engine` picks the cpu engine (here) or the cuda engine (trainer/gpu.py);
trainer/train.py and bench/gpu_mfu.py drive either the same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

from trainer.backend import Backend
from trainer.config import TrainerConfig
from trainer.data import Batch
from trainer.losses import masked_sums, source_sums, token_losses
from trainer.model import build_model
from trainer.optim import build_optimizer, build_scheduler
from trainer.shards import WholeModel, WholeOptimizer


@dataclass
class StepResult:
    loss: float                    # mean per-token loss over the global batch (this rank's share under dp)
    grad_norm: float               # global gradient norm before clipping
    seconds: dict[str, float] = field(default_factory=dict)   # forward_backward, optimizer
    skipped: str | None = None     # why this step updated nothing (trainer/stability.py), or None


Check = Callable[[float, float], "str | None"]   # (loss, grad norm) -> why not to update, or None


def accept_all(loss: float, grad_norm: float) -> None:
    return None


class CpuEngine:
    """fp32 on the CPU: torch AdamW, a plain accumulation loop; tensor parallel through megatron's layers
    and data parallel by summing gradients over gloo, both matching the single process."""

    def __init__(self, cfg: TrainerConfig, backend: Backend, vocab_size: int):
        self.cfg, self.backend = cfg, backend
        self.model = build_model(cfg.model, vocab_size)
        self.gpt = self.model
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, cfg.schedule.steps)

    def parts(self) -> dict[str, Any]:
        return {"model": WholeModel(self.model), "optimizer": WholeOptimizer(self.optimizer, self.model),
                "scheduler": self.scheduler}

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def step(self, batches: list[Batch], check: Check = accept_all) -> StepResult:
        began = time.perf_counter()
        dp_group = parallel_state.get_data_parallel_group()
        data_parallel = dist.get_world_size(dp_group) > 1
        n_tokens = sum(b.loss_mask.sum() for b in batches)   # normalise by the whole global batch's tokens
        if data_parallel:
            n_tokens = n_tokens.clone()
            dist.all_reduce(n_tokens, group=dp_group)
        self.optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for batch in batches:
            objective, ce, _ = masked_sums(self.model, batch, self.cfg.optim.z_loss)
            (objective / n_tokens).backward()
            loss += (ce / n_tokens).item()
        if data_parallel:   # each rank holds its share of the global batch's gradient: sum them
            total = torch.tensor(loss, dtype=torch.float64)
            dist.all_reduce(total, group=dp_group)
            loss = total.item()
            for param in self.model.parameters():
                if param.grad is not None:
                    dist.all_reduce(param.grad, group=dp_group)
        backward_done = time.perf_counter()
        grad_norm = self._clip_grads()
        reason = check(loss, grad_norm.item())
        if reason is None:
            self.scheduler.step(1)                  # lr of update `step` is the schedule at step+1 (no lr=0 update)
            self.optimizer.step()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        return StepResult(loss, grad_norm.item(), {"forward_backward": backward_done - began,
                                                   "optimizer": time.perf_counter() - backward_done}, reason)

    def _clip_grads(self) -> torch.Tensor:
        """The global gradient norm before clipping; under tensor parallelism each sharded parameter counts
        once per shard and each replicated one once (megatron's clip_grads allocates on CUDA)."""
        clip = self.cfg.optim.grad_clip or float("inf")
        tp_group = parallel_state.get_tensor_model_parallel_group()
        if dist.get_world_size(tp_group) == 1:
            return torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        params = [p for p in self.model.parameters() if p.grad is not None]
        counted = [p.grad for p in params if param_is_not_tensor_parallel_duplicate(p)]
        squared = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in counted])) ** 2
        dist.all_reduce(squared, group=tp_group)
        total = squared.sqrt()
        torch._foreach_mul_([p.grad for p in params], torch.clamp(clip / (total + 1e-6), max=1.0))
        return total

    @torch.no_grad()
    def evaluate(self, batches: list[Batch], n_sources: int = 0) -> tuple[float, torch.Tensor | None]:
        """Validation cross entropy per token, and per source [n_sources, 2] (loss sum, tokens) when asked."""
        self.model.eval()
        total = torch.zeros(2 + 2 * n_sources, dtype=torch.float64)
        for batch in batches:
            ce, _ = token_losses(self.model, batch)
            total[0] += (ce.double() * batch.loss_mask).sum()
            total[1] += batch.loss_mask.sum()
            if n_sources and batch.source_ids is not None:
                total[2:] += source_sums(ce, batch.loss_mask, batch.source_ids, n_sources).reshape(-1)
        self.model.train()
        dp_group = parallel_state.get_data_parallel_group()
        if dist.get_world_size(dp_group) > 1:
            dist.all_reduce(total, group=dp_group)
        return (total[0] / total[1]).item(), total[2:].reshape(n_sources, 2) if n_sources else None


def build_engine(cfg: TrainerConfig, backend: Backend, vocab_size: int):
    if backend.name == "cuda":
        from trainer.gpu import CudaEngine
        return CudaEngine(cfg, backend, vocab_size)
    return CpuEngine(cfg, backend, vocab_size)
