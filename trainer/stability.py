"""Skipping bad updates and rolling back when they persist.

A step whose loss or gradient norm is NaN/Inf, whose gradient norm exceeds `stability.max_grad_norm`,
or whose gradient norm is a spike (more than `spike_sigma` standard deviations above the mean of the
last `window` accepted steps, OLMo-core's SkipStepOptimizer rule) updates nothing: the optimizer and
the learning-rate schedule stay where they were, the batch is spent, and the skip is logged and
counted.  After `rollback_after` skips in a row the trainer goes back to its last checkpoint and
leaves the offending batches out from then on (`Progress.skip_batches`), so the data that caused
the trouble is never drawn again.
Not megatron-core's RerunStateMachine: it re-runs a suspect step to blame a GPU or the data, then exits; no skip.
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Any

from trainer.config import StabilityConfig


class SpikeGuard:
    def __init__(self, cfg: StabilityConfig):
        self.cfg = cfg
        self.norms: deque[float] = deque(maxlen=cfg.window)
        self.consecutive = 0

    def check(self, loss: float, grad_norm: float) -> str | None:
        """Why this step must not update the model, or None when it may."""
        if not math.isfinite(loss):
            return f"loss is {loss}"
        if not math.isfinite(grad_norm):
            return f"gradient norm is {grad_norm}"
        if self.cfg.max_grad_norm and grad_norm > self.cfg.max_grad_norm:
            return f"gradient norm {grad_norm:.4g} is above stability.max_grad_norm {self.cfg.max_grad_norm:g}"
        if self.cfg.spike_sigma > 0 and len(self.norms) >= self.cfg.min_history:
            mean = sum(self.norms) / len(self.norms)
            std = math.sqrt(sum((x - mean) ** 2 for x in self.norms) / len(self.norms))
            limit = mean + self.cfg.spike_sigma * std
            if std > 0 and grad_norm > limit:
                return (f"gradient norm {grad_norm:.4g} is a spike: above {limit:.4g}, {self.cfg.spike_sigma:g} "
                        f"standard deviations over the mean of the last {len(self.norms)} steps")
        return None

    def record(self, grad_norm: float, skipped: bool) -> None:
        self.consecutive = self.consecutive + 1 if skipped else 0
        if not skipped:
            self.norms.append(grad_norm)

    @property
    def must_roll_back(self) -> bool:
        return self.cfg.rollback_after > 0 and self.consecutive >= self.cfg.rollback_after

    def state_dict(self) -> dict[str, Any]:
        return {"norms": list(self.norms), "consecutive": self.consecutive}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.norms = deque(state["norms"], maxlen=self.cfg.window)
        self.consecutive = int(state["consecutive"])


def batch_index(step: int, skip_batches: list[int]) -> int:
    """The global batch that step `step` trains on: the step-th batch index left after the skipped ones."""
    index = step
    for skipped in sorted(skip_batches):
        if skipped <= index:
            index += 1
        else:
            break
    return index


def steps_to_batches(steps: range, skip_batches: list[int]) -> list[int]:
    return [batch_index(s, skip_batches) for s in steps]


def insert_sorted(values: list[int], new: list[int]) -> list[int]:
    out = list(values)
    for v in new:
        if v not in out:
            bisect.insort(out, v)
    return out
