"""One optimizer step on a backend: the model, its optimizer and schedule, and how a global batch
becomes an update.  `build_engine` picks the cpu engine (here) or the cuda engine (trainer/gpu.py);
trainer/train.py and bench/gpu_mfu.py drive either the same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
from megatron.core.transformer.module import param_is_not_shared
from megatron.core.utils import get_attr_wrapped_model

from trainer import mcore_patches
from trainer.backend import Backend
from trainer.config import TrainerConfig
from trainer.cpu import build_stages_in_turn
from trainer.data import Batch
from trainer.downstream import model_log_probs
from trainer.losses import masked_sums, source_sums, token_losses
from trainer.model import build_model
from trainer.optim import build_optimizer, build_scheduler
from trainer.sharded_state import ShardedModel, ShardedOptimizer


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
    """fp32 on the CPU: torch AdamW, a plain accumulation loop; tensor parallel through megatron's layers,
    pipeline parallel through megatron's own 1F1B schedule (`get_forward_backward_func`; interleaved over
    `parallel.vp` model chunks per stage) and data parallel by summing gradients over gloo, all matching the
    single process."""

    def __init__(self, cfg: TrainerConfig, backend: Backend, vocab_size: int):
        self.cfg, self.backend = cfg, backend
        self.pipelined = parallel_state.get_pipeline_model_parallel_world_size() > 1
        if self.pipelined:
            backend.dims.require_model_split(cfg.model.num_layers)
            backend.dims.require_interleavable(cfg.grad_accumulation)
        vp = backend.dims.vp if self.pipelined else 1
        if self.pipelined:
            with mcore_patches.applied(mcore_patches.CPU_PIPELINE_PATCHES):
                self.chunks = build_stages_in_turn(
                    lambda chunk: build_model(cfg.model, vocab_size, vp_stage=chunk if vp > 1 else None), vp)
        else:
            self.chunks = [build_model(cfg.model, vocab_size)]
        # this rank's pipeline stage; under the interleaved schedule its chunks (parameters, state_dict keys
        # "<chunk>.<name>": trainer/shards.py numbers them as one process's model)
        self.model = self.chunks[0] if vp == 1 else torch.nn.ModuleList(self.chunks)
        self.gpt = self.model
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, cfg.schedule.steps)
        if self.pipelined:
            for chunk in self.chunks:   # gloo runs batch_isend_irecv as separate sends and receives; no CUDA stream
                chunk.config.batch_p2p_sync = False
            self.forward_backward = get_forward_backward_func()

    def parts(self) -> dict[str, Any]:
        """The engine's checkpoint parts: they save as shards (each rank its own) or whole, as
        `schedule.checkpoint_format` says (trainer/checkpoint.py), and load either, so a run may change format."""
        return {"model": ShardedModel(self.model), "optimizer": ShardedOptimizer(self.optimizer, self.model),
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
        if self.pipelined:
            loss = self._pipeline_step(batches, n_tokens)
        else:
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

    def _pipeline(self, batches: list[Batch], forward_only: bool, n_tokens: torch.Tensor | None = None,
                  n_sources: int = 0) -> list[torch.Tensor]:
        """megatron's 1F1B schedule over this step's micro-batches; the last stage returns one
        [ce sum, tokens, (loss sum, tokens) per source] row per micro-batch, the other stages nothing."""
        interleaved = len(self.chunks) > 1   # megatron's interleaved schedule: a model and a data iterator per chunk
        with mcore_patches.applied(mcore_patches.CPU_PIPELINE_PATCHES):
            reports = self.forward_backward(
                forward_step_func=partial(_stage_forward, z_loss=self.cfg.optim.z_loss, n_tokens=n_tokens,
                                          n_sources=n_sources),
                data_iterator=[iter(batches) for _ in self.chunks] if interleaved else iter(batches),
                model=self.chunks if interleaved else self.model, num_microbatches=len(batches),
                seq_length=self.cfg.model.seq_length, micro_batch_size=self.cfg.batch.micro_batch_size,
                decoder_seq_length=self.cfg.model.seq_length, forward_only=forward_only)
        return [r["sums"] for r in reports]

    def token_log_probs(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        """Downstream scoring (trainer/downstream.py's TokenLogProbs): per-position log p(target) of each
        (inputs, targets) micro-batch, on every rank."""
        if not self.pipelined:
            return model_log_probs(self.model, self.backend.device)(batches)
        with mcore_patches.applied(mcore_patches.CPU_PIPELINE_PATCHES):
            return pipeline_log_probs(self.forward_backward, self.chunks, batches, self.cfg, self.backend)

    def _pipeline_step(self, batches: list[Batch], n_tokens: torch.Tensor) -> float:
        sums = self._pipeline(batches, forward_only=False, n_tokens=n_tokens)
        loss = torch.zeros((), dtype=torch.float64)
        for row in sums:   # in micro-batch order, as the single process adds them
            loss += (row[0].float() / n_tokens).item()
        for chunk in self.chunks:
            if not (chunk.share_embeddings_and_output_weights and (chunk.pre_process or chunk.post_process)
                    and parallel_state.is_rank_in_embedding_group()):
                continue
            # The tied word embedding's two copies (first stage's first chunk, last stage's last chunk) get the sum
            # of both gradients, as megatron's finalize_model_grads does (which needs its DDP's gradient
            # buffers: CUDA only).
            weight = chunk.shared_embedding_or_output_weight()
            if weight.grad is not None:
                dist.all_reduce(weight.grad, group=parallel_state.get_embedding_group())
        return from_last_stage(loss).item()

    def _clip_grads(self) -> torch.Tensor:
        """The global gradient norm before clipping; under tensor and pipeline parallelism each sharded parameter
        counts once per shard, each replicated one and the tied embedding once (megatron's clip_grads
        allocates on CUDA)."""
        clip = self.cfg.optim.grad_clip or float("inf")
        group = parallel_state.get_model_parallel_group()
        if dist.get_world_size(group) == 1:
            return torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        params = [p for p in self.model.parameters() if p.grad is not None]
        counted = [p.grad for p in params if param_is_not_tensor_parallel_duplicate(p) and param_is_not_shared(p)]
        squared = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in counted])) ** 2
        dist.all_reduce(squared, group=group)
        total = squared.sqrt()
        torch._foreach_mul_([p.grad for p in params], torch.clamp(clip / (total + 1e-6), max=1.0))
        return total

    @torch.no_grad()
    def evaluate(self, batches: list[Batch], n_sources: int = 0) -> tuple[float, torch.Tensor | None]:
        """Validation cross entropy per token, and per source [n_sources, 2] (loss sum, tokens) when asked."""
        self.model.eval()
        total = torch.zeros(2 + 2 * n_sources, dtype=torch.float64)
        if self.pipelined:
            for row in self._pipeline(batches, forward_only=True, n_sources=n_sources):
                total += row
            total = from_last_stage(total)
        for batch in batches if not self.pipelined else ():
            ce, _ = token_losses(self.model, batch)
            total += _sums(ce, batch, n_sources)
        self.model.train()
        dp_group = parallel_state.get_data_parallel_group()
        if dist.get_world_size(dp_group) > 1:
            dist.all_reduce(total, group=dp_group)
        return (total[0] / total[1]).item(), total[2:].reshape(n_sources, 2) if n_sources else None


def _sums(ce: torch.Tensor, batch: Batch, n_sources: int) -> torch.Tensor:
    """[ce summed over the loss mask, tokens, (loss sum, tokens) per source] in fp64."""
    row = torch.zeros(2 + 2 * n_sources, dtype=torch.float64)
    row[0] = (ce.detach().double() * batch.loss_mask).sum()
    row[1] = batch.loss_mask.sum()
    if n_sources and batch.source_ids is not None:
        row[2:] = source_sums(ce, batch.loss_mask, batch.source_ids, n_sources).reshape(-1)
    return row


def _stage_loss(batch: Batch, n_tokens: torch.Tensor | None, n_sources: int, per_token: torch.Tensor):
    """megatron's three-value loss contract on the last stage: (what to backpropagate: the objective summed and
    divided by the global batch's tokens, as the single process does; tokens; the sums to report)."""
    ce, objective = per_token
    denominator = n_tokens if n_tokens is not None else 1
    return ((objective.float() * batch.loss_mask).sum() / denominator, batch.loss_mask.sum().to(torch.int),
            {"sums": _sums(ce, batch, n_sources)})


def _stage_forward(data_iterator, model, z_loss: float, n_tokens: torch.Tensor | None, n_sources: int):
    """megatron's forward_step_func: every stage reads the same micro-batch; the first embeds its tokens (the
    others take the activations megatron received from the stage before), the last computes the losses."""
    batch: Batch = next(data_iterator)
    if not model.post_process:   # megatron's model (chunk) knows whether it is the last (virtual) stage
        return model(batch.tokens, batch.position_ids, batch.attention_mask), None
    ce, objective = token_losses(model, batch, z_loss)
    return torch.stack([ce, objective]), partial(_stage_loss, batch, n_tokens, n_sources)


@torch.no_grad()
def pipeline_log_probs(forward_backward, chunks: list[torch.nn.Module],
                       batches: Sequence[tuple[torch.Tensor, torch.Tensor]], cfg: TrainerConfig,
                       backend: Backend) -> list[torch.Tensor]:
    """Downstream scoring through megatron's schedule (either engine), forward only: the last stage computes each
    micro-batch's log-probabilities, then hands them to every stage.  The schedule passes activations of one shape,
    [seq_length, micro-batch, hidden], so each micro-batch is right-padded to evaluation.batch_size x seq_length
    (causal attention keeps the padding out of the real positions), and the interleaved schedule gets whole groups
    of pp."""
    size, width = cfg.evaluation.batch_size, cfg.model.seq_length
    interleaved = len(chunks) > 1
    group = backend.dims.pp if interleaved else 1
    count = -(-len(batches) // group) * group
    padded = []
    for index in range(count):
        inputs = torch.zeros(size, width, dtype=torch.long, device=backend.device)
        targets = torch.zeros(size, width, dtype=torch.long, device=backend.device)
        if index < len(batches):
            given_inputs, given_targets = batches[index]
            inputs[:given_inputs.shape[0], :given_inputs.shape[1]] = given_inputs
            targets[:given_targets.shape[0], :given_targets.shape[1]] = given_targets
        padded.append((inputs, targets))
    reports = forward_backward(
        forward_step_func=_score_forward,
        data_iterator=[iter(padded) for _ in chunks] if interleaved else iter(padded),
        model=chunks if interleaved else chunks[0], num_microbatches=count, seq_length=width,
        micro_batch_size=size, decoder_seq_length=width, forward_only=True)
    logp = (torch.stack([r["logp"] for r in reports]).contiguous() if reports
            else torch.zeros(count, size, width, dtype=torch.float32, device=backend.device))
    from_last_stage(logp)
    return [logp[i, :inputs.shape[0], :inputs.shape[1]] for i, (inputs, _) in enumerate(batches)]


def from_last_stage(tensor: torch.Tensor) -> torch.Tensor:
    """The last pipeline stage's `tensor`, in place on every stage of this rank's pipeline (either engine: megatron's
    schedule returns the loss reports on the last stage only, and rank 0, which logs, is on the first)."""
    dist.broadcast(tensor, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                   group=parallel_state.get_pipeline_model_parallel_group())
    return tensor


def _score_forward(data_iterator, model):
    """megatron's forward_step_func for downstream scoring: the last stage computes each target's cross entropy
    (the earlier stages ignore the labels)."""
    inputs, targets = next(data_iterator)
    positions = torch.arange(inputs.shape[1], device=inputs.device).expand(inputs.shape[0], -1)
    output = model(inputs, positions, None, labels=targets)
    if not get_attr_wrapped_model(model, "post_process"):   # a GPTModel, or one inside megatron's DDP (cuda)
        return output, None
    return output, _score_report


def _score_report(ce: torch.Tensor):
    """megatron's three-value loss contract, nothing to backpropagate: (0, tokens, log p(target) = -ce)."""
    tokens = torch.tensor(ce.numel(), dtype=torch.int, device=ce.device)
    return ce.new_zeros(()), tokens, {"logp": -ce.detach().float()}


def build_engine(cfg: TrainerConfig, backend: Backend, vocab_size: int):
    if backend.name == "cuda":
        from trainer.gpu import CudaEngine
        return CudaEngine(cfg, backend, vocab_size)
    return CpuEngine(cfg, backend, vocab_size)
