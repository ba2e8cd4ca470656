"""Refuse a run that cannot fit its device before anything is allocated.

The planner's estimate (`trainer.plan.estimate_memory`: weights, gradients, optimizer states, activations
per Korthikanti et al.) for this run's model, layout and micro-batch, against the device's memory: a GPU's
total memory, or on the cpu backend the host RAM available now, shared by the processes of this machine.
Without the check, `model.seq_length=50000` passes every other test and asks for ~320 GB at step 1.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import torch

from conf import ConfigError
from trainer.config import TrainerConfig
from trainer.plan import estimate_memory
from trainer.plan_config import Layout, MemoryConfig, ModelShape

log = logging.getLogger(__name__)
GIB = 2 ** 30
# On the cpu backend the peak of a forward and backward pass is ~1.45x the activations the formula keeps
# (bench/trainer_memory.py, seq 512-4096: the backward's transient buffers in fp32); counted, not ignored.
CPU_PEAK_OVER_KEPT = 1.5


def run_estimate(cfg: TrainerConfig, vocab_size: int) -> dict[str, float]:
    """Bytes per device, by component and in total, for this config and the manifest's vocabulary."""
    m, cuda = cfg.model, cfg.backend == "cuda"
    shape = ModelShape(num_layers=m.num_layers, hidden_size=m.hidden_size, num_attention_heads=m.num_attention_heads,
                       num_query_groups=m.num_query_groups or m.num_attention_heads,
                       ffn_hidden_size=m.ffn_hidden_size, vocab_size=vocab_size, seq_length=m.seq_length,
                       gated_linear_unit=m.activation == "swiglu", share_embeddings=m.share_embeddings,
                       normalization=m.normalization)
    p = cfg.parallel
    fp32 = not cuda or cfg.cuda.precision == "fp32"
    # SDPA never stores the s x s scores (its CPU kernels neither, with a document mask: measured, memory grows
    # linearly in s); megatron's unfused attention does.
    fused = m.attention == "sdpa"
    memory = MemoryConfig(precision="fp32" if fp32 else "bf16", distributed_optimizer=cuda, recompute="none",
                          sequence_parallel=False, flash_attention=fused, usable_fraction=cfg.limits.memory_fraction,
                          vocab_multiple=m.vocab_multiple)
    parts = estimate_memory(shape, Layout(tp=p.tp, pp=p.pp, cp=p.cp, dp=p.dp), cfg.batch.micro_batch_size,
                            cfg.grad_accumulation, memory)
    if fp32:   # Korthikanti's counts are bytes of 16-bit activations
        parts["activations"] *= 2
    if cfg.data.reset_attention_mask:   # a boolean s x s document mask per sample, and SDPA's additive copy of it
        parts["attention_mask"] = float(cfg.batch.micro_batch_size * m.seq_length ** 2 * (1 + (4 if fp32 else 2)))
    if not cuda:
        for name in ("activations", "attention_mask"):
            if name in parts:
                parts[name] *= CPU_PEAK_OVER_KEPT
    total = sum(v for k, v in parts.items() if k != "total")
    return {k: v for k, v in parts.items() if k != "total"} | {"total": total}


def device_memory(cfg: TrainerConfig) -> tuple[float, str]:
    """(bytes this process may use, what they are)."""
    if cfg.backend == "cuda":
        _, total = torch.cuda.mem_get_info()
        return float(total), f"{torch.cuda.get_device_name()} memory"
    import psutil   # megatron-core's own dependency

    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))   # torchrun's processes on this machine share RAM
    available = psutil.virtual_memory().available / processes
    return float(available), "host RAM available" + (f" per process ({processes} on this machine)"
                                                     if processes > 1 else "")


def check_fits(cfg: TrainerConfig, vocab_size: int) -> dict[str, Any]:
    """The estimate, or a ConfigError saying what to lower when it passes `limits.memory_fraction` of the device."""
    parts = run_estimate(cfg, vocab_size)
    if cfg.limits.memory_fraction == 0:
        return parts
    have, what = device_memory(cfg)
    budget = cfg.limits.memory_fraction * have
    if parts["total"] > budget:
        biggest = max((k for k in parts if k != "total"), key=parts.get)
        detail = ", ".join(f"{k} {v / GIB:,.1f}" for k, v in parts.items() if k != "total")
        raise ConfigError(
            f"this run needs about {parts['total'] / GIB:,.1f} GiB per device ({detail} GiB; most is {biggest}) "
            f"but {what} is {have / GIB:,.1f} GiB, of which limits.memory_fraction={cfg.limits.memory_fraction} "
            f"may be used: lower model.seq_length ({cfg.model.seq_length}) or batch.micro_batch_size "
            f"({cfg.batch.micro_batch_size}), or the model's size; `python -m trainer.plan --model trainer` "
            "shows the estimate")
    log.info("memory estimate %.2f GiB per device of %.1f GiB (%s)", parts["total"] / GIB, have / GIB, what)
    return parts
