"""The global batches of consecutive steps, prepared ahead by one thread.

Sample lookup and collation (numpy index arithmetic in GPTDataset) run in a background thread
`data.prefetch` steps ahead; on cuda the batches are pinned there, so the copy to the GPU is an
asynchronous DMA.  The time the training loop spends waiting is measured, so a slow data path
shows up as `data_wait` instead of as a mysteriously slow step.
Not torch's DataLoader: it prefetches (prefetch_factor) only in worker processes (num_workers > 0), not in one thread.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Iterator

import torch

from trainer.config import TrainerConfig
from trainer.data import Batch, Datasets, micro_batches
from trainer.stability import batch_index


def _map(batch: Batch, fn) -> Batch:
    return Batch(**{f.name: None if getattr(batch, f.name) is None else fn(getattr(batch, f.name))
                    for f in dataclasses.fields(Batch)})


def _pinned(batch: Batch) -> Batch:
    return _map(batch, torch.Tensor.pin_memory)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return _to(batch, device, non_blocking=False)


def _to(batch: Batch, device: torch.device, non_blocking: bool) -> Batch:
    return _map(batch, lambda t: t.to(device, non_blocking=non_blocking))


class StepLoader:
    """Yields (step, micro-batches on the device, lineage of their samples) for steps [start, stop)."""

    _DONE = object()

    def __init__(self, cfg: TrainerConfig, datasets: Datasets, start: int, stop: int, dp_rank: int, dp: int,
                 device: torch.device, skip_batches: list[int] = ()):
        self.cfg, self.datasets, self.dp_rank, self.dp, self.device = cfg, datasets, dp_rank, dp, device
        self.skip_batches = sorted(skip_batches)   # global batches left out after a rollback (trainer/stability.py)
        self.start, self.stop = start, stop
        self.pin = device.type == "cuda"
        self.wait_s = 0.0             # total time the consumer waited for a batch
        self._queue: queue.Queue = queue.Queue(maxsize=max(cfg.data.prefetch, 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if cfg.data.prefetch > 0:
            self._thread = threading.Thread(target=self._produce, name="step-loader", daemon=True)
            self._thread.start()

    def _prepare(self, step: int) -> tuple[int, list[Batch], list[dict[str, Any]]]:
        batch = batch_index(step, self.skip_batches)
        batches, samples = micro_batches(self.cfg, self.datasets, batch, self.dp_rank, self.dp)
        if self.pin:
            batches = [_pinned(b) for b in batches]
        return step, batches, samples

    def _produce(self) -> None:
        try:
            for step in range(self.start, self.stop):
                item = self._prepare(step)
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as exc:   # handed to the consumer, which raises it in the training loop
            self._queue.put(exc)
            return
        self._queue.put(self._DONE)

    def __iter__(self) -> Iterator[tuple[int, list[Batch], list[dict[str, Any]]]]:
        if self._thread is None:
            for step in range(self.start, self.stop):
                began = time.perf_counter()
                step, batches, samples = self._prepare(step)
                moved = [_to(b, self.device, non_blocking=False) for b in batches]
                self.wait_s += time.perf_counter() - began
                yield step, moved, samples
            return
        while True:
            began = time.perf_counter()
            item = self._queue.get()
            self.wait_s += time.perf_counter() - began
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            step, batches, samples = item
            # From pinned memory the copy is an asynchronous DMA, ordered before the step's kernels on the stream.
            yield step, [_to(b, self.device, non_blocking=self.pin) for b in batches], samples

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
