"""Core attention through `torch.nn.functional.scaled_dot_product_attention` for megatron's local layer spec.

megatron-core's local spec computes attention unfused (`DotProductAttention`: baddbmm, a separate
softmax, bmm: an s×s score tensor per head in memory). Without Transformer Engine there is no fused
alternative in the spec, so this module keeps megatron's constructor, shapes and RNG tracker and
hands the arithmetic to SDPA, which picks flash/cuDNN/memory-efficient kernels on a GPU and a
fused CPU kernel here (measured on an H200: 7.7 ms → 0.63 ms per layer, notes/trainer-anchors.md).
"""
from __future__ import annotations

import contextlib

import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType


class SDPAttention(DotProductAttention):
    """Drop-in `core_attention` submodule: same arguments and output as DotProductAttention."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.config.softmax_type != "vanilla" or self.config.window_size is not None:
            raise ValueError("SDPAttention computes vanilla softmax attention without a window; "
                             f"got softmax_type={self.config.softmax_type!r} window_size={self.config.window_size}")
        self.gqa = self.num_attention_heads_per_partition != self.num_query_groups_per_partition

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        if packed_seq_params is not None or attention_bias is not None:
            raise ValueError("SDPAttention takes neither packed sequences nor an attention bias")
        seq, batch = query.shape[0], query.shape[1]
        # megatron's [s, b, heads, head_dim] -> SDPA's [b, heads, s, head_dim]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        causal = attention_mask is None and mask_type == AttnMaskType.causal
        # megatron's masks are True where attention is forbidden; SDPA's boolean masks are True where allowed.
        keep = None if attention_mask is None else ~attention_mask
        dropout = self.attention_dropout.p if self.training else 0.0
        # The RNG fork only matters when dropout draws numbers; skipping it keeps torch.compile's graph whole.
        rng = tensor_parallel.get_cuda_rng_tracker().fork() if dropout > 0 else contextlib.nullcontext()
        with rng:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout, is_causal=causal,
                                                     scale=self.softmax_scale, enable_gqa=self.gqa)
        # [b, heads, s, head_dim] -> [s, b, heads * head_dim]
        return context.permute(2, 0, 1, 3).reshape(seq, batch, self.hidden_size_per_partition)
