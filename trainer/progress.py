"""What a run has done so far: the checkpointable counters, and the progress line a person reads."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any


@dataclass
class Progress:
    step: int = 0                      # optimizer steps completed = index of the next global batch
    tokens_seen: int = 0               # input tokens consumed (global batch x seq length per step)
    first_loss: float | None = None    # loss of step 0, kept across resumes for result.json
    last_loss: float | None = None
    run_id: str | None = None          # the MLflow run a resume continues
    skipped_steps: int = 0             # steps that updated nothing (trainer/stability.py)
    rollbacks: int = 0                 # returns to the last checkpoint after repeated skips
    skip_batches: list[int] = field(default_factory=list)   # global batches never to be drawn again
    downstream: dict[str, float] = field(default_factory=dict)   # the last downstream evaluation's figures

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict)
                    else value)


class Meter:
    """Step rate since this process started (a resumed run does not count the killed run's steps)."""

    def __init__(self, total_steps: int, start_step: int):
        self.total, self.start, self.began = total_steps, start_step, time.perf_counter()

    def steps_per_s(self, step: int) -> float:
        """Completed steps per second of wall time in this process (data, logging and checkpoints included)."""
        return (step + 1 - self.start) / (time.perf_counter() - self.began)

    def line(self, step: int, loss: float, lr: float, grad_norm: float, tokens_per_s: float) -> str:
        done = step + 1 - self.start
        per_step = (time.perf_counter() - self.began) / max(done, 1)
        eta = timedelta(seconds=round(per_step * (self.total - step - 1)))
        return (f"step {step + 1:>6}/{self.total} | loss {loss:7.4f} | lr {lr:.2e} | grad {grad_norm:6.3f} | "
                f"{tokens_per_s:9,.0f} tok/s | ETA {eta}")
