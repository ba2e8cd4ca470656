"""The training objective per token: cross entropy, plus PaLM's optional z-loss.

z-loss (PaLM, arXiv 2204.02311 §5; OLMo 2) adds `z_loss * log(Z)^2` per token, Z the softmax normaliser,
which keeps the output logits from drifting to large magnitudes (a source of late loss spikes in bf16).
Without it the model computes its own (on a GPU, fused) cross entropy; with it the logits are gathered
over tensor parallelism and both terms are computed here in fp32.  The loss reported is always the cross
entropy, so curves with and without z-loss compare.
"""
from __future__ import annotations

import torch
from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region

from trainer.data import Batch


def token_losses(model: torch.nn.Module, batch: Batch, z_loss: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross entropy, objective) per token, each [b, s]; they are the same tensor when `z_loss` is 0."""
    if not z_loss:
        ce = model(batch.tokens, batch.position_ids, batch.attention_mask, labels=batch.labels)
        return ce, ce
    logits = model(batch.tokens, batch.position_ids, batch.attention_mask)        # [b, s, vocab / tp]
    logits = gather_from_tensor_model_parallel_region(logits).float()
    log_z = torch.logsumexp(logits, dim=-1)
    ce = log_z - logits.gather(-1, batch.labels.unsqueeze(-1)).squeeze(-1)
    return ce, ce + z_loss * log_z.square()


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
