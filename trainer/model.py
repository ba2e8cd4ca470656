"""megatron-core's GPTModel (local layer spec) built from the trainer config and the manifest's vocab.

The model knows nothing about parallelism or devices: megatron reads tp/pp from its parallel state,
which the backend set up.
"""
from __future__ import annotations

import torch
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig

from trainer.config import ModelConfig


def padded_vocab_size(vocab_size: int, multiple: int, tp: int = 1) -> int:
    """Round the vocab up (Megatron's make-vocab-size-divisible-by): the output GEMM and its TP split tile
    evenly; the extra rows are never targets, so they only learn to be unlikely."""
    step = multiple * tp
    return -(-vocab_size // step) * step


def transformer_config(m: ModelConfig) -> TransformerConfig:
    return TransformerConfig(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        ffn_hidden_size=m.ffn_hidden_size,
        normalization=m.normalization,
        hidden_dropout=m.dropout,
        attention_dropout=m.dropout,
        init_method_std=m.init_method_std,
        use_cpu_initialization=True,   # initialise on the CPU: the same weights whatever the device or TP size
        params_dtype=torch.float32,
    )


def build_model(m: ModelConfig, vocab_size: int) -> GPTModel:
    return GPTModel(
        config=transformer_config(m),
        transformer_layer_spec=get_gpt_layer_local_spec(normalization=m.normalization),
        vocab_size=vocab_size,
        max_sequence_length=m.seq_length,
        share_embeddings_and_output_weights=m.share_embeddings,
        position_embedding_type=m.position_embedding,
        rotary_base=m.rotary_base,
    )


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
