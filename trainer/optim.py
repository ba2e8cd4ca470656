"""AdamW and megatron's learning-rate schedule.

torch's AdamW rather than `get_megatron_optimizer`: megatron's optimizer asserts CUDA tensors when
it clips gradients (notes/packages.md); its OptimizerParamScheduler works on any torch optimizer.
"""
from __future__ import annotations

import torch
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

from trainer.config import OptimConfig


def build_optimizer(model: torch.nn.Module, o: OptimConfig) -> torch.optim.AdamW:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        # Norm gains and biases are 1-D: decaying them toward 0 only hurts (GPT-2/nanoGPT convention).
        (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [{"params": decay, "wd_mult": 1.0}, {"params": no_decay, "wd_mult": 0.0}]
    return torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, o: OptimConfig, steps: int) -> OptimizerParamScheduler:
    return OptimizerParamScheduler(
        optimizer, init_lr=0.0, max_lr=o.lr, min_lr=o.min_lr, lr_warmup_steps=o.warmup_steps,
        lr_decay_steps=steps, lr_decay_style=o.decay_style,
        start_wd=o.weight_decay, end_wd=o.weight_decay, wd_incr_steps=steps, wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=False)  # a resumed run must match its config, not silently override it
