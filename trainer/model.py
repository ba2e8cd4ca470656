"""megatron-core's GPTModel (local layer spec) built from the trainer config and the manifest's vocab.

The model knows nothing about parallelism or devices: megatron reads tp/pp from its parallel state,
which the backend set up.  The same function builds the model for both backends; the cuda backend
passes its settings (bf16, initialisation on the GPU, fusions).
"""
from __future__ import annotations

import torch
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.spec_utils import ModuleSpec

from trainer.attention import SDPAttention
from trainer.config import CudaConfig, ModelConfig


def padded_vocab_size(vocab_size: int, multiple: int, tp: int = 1) -> int:
    """Round the vocab up (Megatron's make-vocab-size-divisible-by): the output GEMM and its TP split tile
    evenly; the extra rows are never targets, so they only learn to be unlikely."""
    step = multiple * tp
    return -(-vocab_size // step) * step


def transformer_config(m: ModelConfig, cuda: CudaConfig | None = None) -> TransformerConfig:
    """`cuda` None: the cpu backend (fp32, initialised on the CPU, no fusions)."""
    bf16 = cuda is not None and cuda.precision == "bf16"
    dtype = torch.bfloat16 if bf16 else torch.float32
    return TransformerConfig(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups or None,
        ffn_hidden_size=m.ffn_hidden_size,
        gated_linear_unit=m.activation == "swiglu",
        activation_func=torch.nn.functional.silu if m.activation == "swiglu" else torch.nn.functional.gelu,
        add_bias_linear=m.add_bias_linear,
        normalization=m.normalization,
        hidden_dropout=m.dropout,
        attention_dropout=m.dropout,
        init_method_std=m.init_method_std,
        # The cpu backend initialises on the CPU: the same weights whatever the TP size. The cuda backend
        # initialises on the GPU from megatron's tracked CUDA RNG (a 1 B model takes seconds, not minutes).
        use_cpu_initialization=cuda is None,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=bf16,
        # Loss per token summed over the global batch, divided once by its token count (finalize_model_grads).
        calculate_per_token_loss=True,
        # megatron's jit_fuser (torch.compile) fusions; the ones that need Transformer Engine or Apex stay off.
        # megatron fuses bias+GELU and bias+SwiGLU (its bias_swiglu_impl); a plain GELU without bias has nothing to fuse
        bias_activation_fusion=cuda is not None and (m.add_bias_linear or m.activation == "swiglu"),
        bias_dropout_fusion=cuda is not None,
        cross_entropy_loss_fusion=cuda is not None and cuda.cross_entropy_fusion,
        cross_entropy_fusion_impl="native",
        gradient_accumulation_fusion=False,   # needs Apex's or TE's fused wgrad kernel
        masked_softmax_fusion=False,          # the unfused path's CUDA kernel needs Apex; SDPA fuses it anyway
        cuda_graph_scope=[],   # megatron 0.16.1's default, "full", warns it is deprecated for [], which means the same
    )


def layer_spec(m: ModelConfig) -> ModuleSpec:
    spec = get_gpt_layer_local_spec(normalization=m.normalization)
    if m.attention == "sdpa":
        spec.submodules.self_attention.submodules.core_attention = SDPAttention
    return spec


def build_model(m: ModelConfig, vocab_size: int, cuda: CudaConfig | None = None,
                vp_stage: int | None = None) -> GPTModel:
    """This rank's pipeline stage of the model (or its `vp_stage`-th chunk under the interleaved schedule):
    megatron's parallel state says which layers it holds, whether it embeds the tokens (the first stage's first
    chunk) and whether it computes the loss (the last stage's last chunk)."""
    config = transformer_config(m, cuda)
    staged = parallel_state.model_parallel_is_initialized()   # else one process holds the whole model
    config.pipeline_model_parallel_size = parallel_state.get_pipeline_model_parallel_world_size() if staged else 1
    vp = parallel_state.get_virtual_pipeline_model_parallel_world_size() if staged else None
    if vp is not None:
        # set after construction, like the pipeline size: TransformerConfig derives the micro-batch group from
        # the pipeline size it was built with (1), and megatron's interleaved schedule needs it >= pp
        config.virtual_pipeline_model_parallel_size = vp
        config.microbatch_group_size_per_vp_stage = config.pipeline_model_parallel_size
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec(m),
        vocab_size=vocab_size,
        max_sequence_length=m.seq_length,
        pre_process=not staged or parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
        post_process=not staged or parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
        share_embeddings_and_output_weights=m.share_embeddings,
        position_embedding_type=m.position_embedding,
        rotary_base=m.rotary_base,
        vp_stage=vp_stage,
    )


def count_parameters(model: torch.nn.Module) -> int:
    """The whole model's parameters, however it is split: a tensor-parallel shard counts once per shard, a
    pipeline stage adds the others' (the last stage's copy of a tied embedding left out). Under model
    parallelism every rank of the model-parallel group must call it (it sums over that group)."""
    return _whole_count(model, lambda name: True)


def transformer_parameters(model: torch.nn.Module) -> int:
    """Parameters outside the input embedding and the output layer (the N of the PaLM FLOPs formula), of the
    whole model as `count_parameters` counts them (collective likewise)."""
    skip = ("embedding.", "output_layer.")
    return _whole_count(model, lambda name: not any(part in name for part in skip))


def _whole_count(model: torch.nn.Module, counts) -> int:
    named = [(name, p) for name, p in model.named_parameters() if counts(name)]
    if not (parallel_state.model_parallel_is_initialized()
            and torch.distributed.get_world_size(parallel_state.get_model_parallel_group()) > 1):
        return sum(p.numel() for _, p in named)
    tp = parallel_state.get_tensor_model_parallel_world_size()
    mine = sum(p.numel() * (tp if getattr(p, "tensor_model_parallel", False) else 1) for _, p in named
               if not getattr(p, "shared", False))   # megatron marks the last stage's tied-embedding copy shared
    # on the parameters' device: the pipeline group is gloo on the cpu backend, NCCL (CUDA tensors only) on cuda
    total = torch.tensor(mine, dtype=torch.int64, device=next(model.parameters()).device)
    torch.distributed.all_reduce(total, group=parallel_state.get_pipeline_model_parallel_group())
    return int(total)
