"""The training objective per token: cross entropy, plus PaLM's optional z-loss.

z-loss (PaLM, arXiv 2204.02311 §5; OLMo 2) adds `z_loss * log(Z)^2` per token, Z the softmax normaliser,
which keeps the output logits from drifting to large magnitudes (a source of late loss spikes in bf16).
Without it the model computes its own (on a GPU, fused) cross entropy; with it both terms are computed here in
fp32 from each tensor-parallel rank's slice of the vocabulary, as megatron's vocab-parallel cross entropy does
(a max, a sum of exponentials and the target's logit, each reduced over the tensor-parallel group), so the
full logits are never gathered.  The loss reported is always the cross entropy, so curves with and without
z-loss compare.
"""
from __future__ import annotations

import torch
from megatron.core import parallel_state
from megatron.core.tensor_parallel import reduce_from_tensor_model_parallel_region

from trainer.data import Batch


def token_losses(model: torch.nn.Module, batch: Batch, z_loss: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross entropy, objective) per token, each [b, s]; they are the same tensor when `z_loss` is 0."""
    if not z_loss:
        ce = model(batch.tokens, batch.position_ids, batch.attention_mask, labels=batch.labels)
        return ce, ce
    logits = model(batch.tokens, batch.position_ids, batch.attention_mask)        # [b, s, vocab / tp]
    ce, log_z = vocab_parallel_terms(logits.float(), batch.labels)
    return ce, ce + z_loss * log_z.square()


def vocab_parallel_terms(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross entropy, log Z) per token from this rank's slice of the vocabulary ([..., vocab / tp]).

    Hand-written because megatron's `vocab_parallel_cross_entropy` shifts the logits in place and returns no
    log Z; its reductions are the same: the max (a constant, without gradient), then the sum of exponentials
    and the target's logit through megatron's autograd-aware all-reduce."""
    tp = parallel_state.get_tensor_model_parallel_world_size() if parallel_state.model_parallel_is_initialized() else 1
    width = logits.size(-1)
    start = parallel_state.get_tensor_model_parallel_rank() * width if tp > 1 else 0
    shift = logits.detach().amax(dim=-1)
    if tp > 1:
        torch.distributed.all_reduce(shift, op=torch.distributed.ReduceOp.MAX,
                                     group=parallel_state.get_tensor_model_parallel_group())
    sum_exp = reduce_from_tensor_model_parallel_region(torch.exp(logits - shift.unsqueeze(-1)).sum(dim=-1))
    log_z = sum_exp.log() + shift
    mine = (labels >= start) & (labels < start + width)
    target = logits.gather(-1, (labels - start).clamp(0, width - 1).unsqueeze(-1)).squeeze(-1)
    target = reduce_from_tensor_model_parallel_region(torch.where(mine, target, torch.zeros_like(target)))
    return log_z - target, log_z


def token_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross entropy per token in fp32 from megatron's [s, b, vocab] logits (the whole vocabulary, tp = 1) and
    [b, s] labels, as [b, s]: megatron's `compute_language_model_loss` contract.

    Written for torch.compile: the target's logit is picked by comparing the vocabulary's indices with the label
    (a reduction, where a gather's backward would scatter into a zero-filled tensor), so the forward is reductions
    over the bf16 logits and the backward one elementwise pass that recomputes the softmax from them.  megatron's
    own fused cross entropy instead stores the softmax in fp32 (twice the logits' bytes) between the two."""
    x = logits.transpose(0, 1).float()
    vocab = torch.arange(x.size(-1), device=x.device)
    target = torch.where(vocab == labels.unsqueeze(-1), x, 0.0).sum(-1)
    return torch.logsumexp(x, dim=-1) - target


def compile_language_model_loss(gpt: torch.nn.Module) -> bool:
    """Give a last-stage GPTModel (or chunk) the compiled `token_cross_entropy` as its loss; True if it took it.
    Only at tp = 1: under tensor parallelism megatron's vocabulary-parallel cross entropy stays."""
    tp = parallel_state.get_tensor_model_parallel_world_size() if parallel_state.model_parallel_is_initialized() else 1
    if tp > 1 or not getattr(gpt, "post_process", False):
        return False
    compiled = torch.compile(token_cross_entropy, dynamic=False)
    gpt.compute_language_model_loss = lambda labels, logits: compiled(logits, labels)   # an instance attribute
    return True


def masked_sums(model: torch.nn.Module, batch: Batch, z_loss: float = 0.0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(objective summed where loss_mask is 1, cross entropy summed likewise (no gradient), tokens counted)."""
    ce, objective = token_losses(model, batch, z_loss)
    mask = batch.loss_mask
    return (objective.float() * mask).sum(), (ce.float() * mask).sum().detach(), mask.sum()


def source_sums(ce: torch.Tensor, mask: torch.Tensor, source_ids: torch.Tensor, n_sources: int) -> torch.Tensor:
    """[n_sources, 2]: per source, the masked cross entropy summed and the tokens it covers (fp64)."""
    ids = source_ids.reshape(-1).to(ce.device)
    weights = mask.reshape(-1).double()
    loss = torch.zeros(n_sources, dtype=torch.float64, device=ce.device).index_add_(
        0, ids, ce.detach().reshape(-1).double() * weights)
    tokens = torch.zeros(n_sources, dtype=torch.float64, device=ce.device).index_add_(0, ids, weights)
    return torch.stack([loss, tokens], dim=1)
