"""The trainer's typed configuration; every default and its reason lives in `conf/trainer.yaml`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import ConfigError, load


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    seq_length: int
    normalization: str
    position_embedding: str
    rotary_base: int
    dropout: float
    init_method_std: float
    share_embeddings: bool
    vocab_multiple: int
    attention: str
    num_query_groups: int
    activation: str
    add_bias_linear: bool


@dataclass(frozen=True)
class OptimConfig:
    lr: float
    min_lr: float
    warmup_steps: int
    decay_style: str
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    grad_clip: float
    z_loss: float


@dataclass(frozen=True)
class BatchConfig:
    micro_batch_size: int
    global_batch_size: int


@dataclass(frozen=True)
class DataConfig:
    split: str
    eod_mask_loss: bool
    reset_position_ids: bool
    reset_attention_mask: bool
    prefetch: int


@dataclass(frozen=True)
class CudaConfig:
    precision: str
    compile: bool
    fused_optimizer: bool
    cross_entropy_fusion: bool
    compile_loss: bool
    scale_loss_by_tokens: bool
    compiled_grad_accumulation: bool
    overlap_grad_reduce: bool
    deterministic: bool


@dataclass(frozen=True)
class ScheduleConfig:
    steps: int
    log_interval: int
    eval_interval: int
    eval_batches: int
    checkpoint_interval: int
    keep_checkpoints: int
    checkpoint_format: str
    checkpoint_async: bool


@dataclass(frozen=True)
class ParallelConfig:
    tp: int
    pp: int
    cp: int
    dp: int
    vp: int


@dataclass(frozen=True)
class StabilityConfig:
    max_grad_norm: float
    spike_sigma: float
    window: int
    min_history: int
    rollback_after: int
    max_rollbacks: int


@dataclass(frozen=True)
class RemoteConfig:
    download_attempts: int
    drain_timeout_s: float
    shared_staging: bool


@dataclass(frozen=True)
class EvaluationConfig:
    tasks: tuple[str, ...]
    interval: int
    max_examples: int
    batch_size: int


@dataclass(frozen=True)
class LineageConfig:
    detail: str


@dataclass(frozen=True)
class LimitsConfig:
    memory_fraction: float


@dataclass(frozen=True)
class TrainerConfig:
    backend: str
    seed: int
    experiment: str
    model: ModelConfig
    optim: OptimConfig
    batch: BatchConfig
    data: DataConfig
    schedule: ScheduleConfig
    parallel: ParallelConfig
    remote: RemoteConfig
    cuda: CudaConfig
    stability: StabilityConfig
    limits: LimitsConfig
    evaluation: EvaluationConfig
    lineage: LineageConfig

    def __post_init__(self) -> None:
        m, b, s = self.model, self.batch, self.schedule
        for section, names in (("model", ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size",
                                          "seq_length", "vocab_multiple")),
                               ("batch", ("micro_batch_size", "global_batch_size"))):
            for name in names:
                value = getattr(getattr(self, section), name)
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{section}.{name} must be a positive integer, got {value!r}")
        if not 0.0 <= m.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {m.dropout}")
        if self.optim.lr <= 0 or self.optim.min_lr < 0 or self.optim.min_lr > self.optim.lr:
            raise ConfigError(f"optim.lr must be > 0 and 0 <= optim.min_lr <= optim.lr, got lr={self.optim.lr} "
                              f"min_lr={self.optim.min_lr}")
        if m.hidden_size % m.num_attention_heads:
            raise ConfigError(f"model.hidden_size {m.hidden_size} is not divisible by "
                              f"model.num_attention_heads {m.num_attention_heads}")
        if m.normalization not in ("RMSNorm", "LayerNorm"):
            raise ConfigError(f"model.normalization must be RMSNorm or LayerNorm, got {m.normalization!r}")
        if m.position_embedding not in ("rope", "learned_absolute"):
            raise ConfigError("model.position_embedding must be rope or learned_absolute, "
                              f"got {m.position_embedding!r}")
        if m.num_query_groups < 0 or (m.num_query_groups and m.num_attention_heads % m.num_query_groups):
            raise ConfigError(f"model.num_query_groups {m.num_query_groups} must divide model.num_attention_heads "
                              f"{m.num_attention_heads} (0 = one group per head)")
        if m.activation not in ("gelu", "swiglu"):
            raise ConfigError(f"model.activation must be gelu or swiglu, got {m.activation!r}")
        if m.attention not in ("sdpa", "unfused"):
            raise ConfigError(f"model.attention must be sdpa or unfused, got {m.attention!r}")
        if self.backend not in ("cpu", "cuda"):
            raise ConfigError(f"backend must be cpu or cuda, got {self.backend!r}")
        if self.cuda.precision not in ("bf16", "fp32"):
            raise ConfigError(f"cuda.precision must be bf16 or fp32, got {self.cuda.precision!r}")
        st = self.stability
        if st.window < 1 or st.min_history < 1 or st.min_history > st.window:
            raise ConfigError(f"stability.window ({st.window}) and stability.min_history ({st.min_history}) must be "
                              "positive, with min_history <= window")
        if st.max_grad_norm < 0 or st.spike_sigma < 0 or st.rollback_after < 0 or st.max_rollbacks < 0:
            raise ConfigError("stability.max_grad_norm, spike_sigma, rollback_after and max_rollbacks must be >= 0")
        if self.data.prefetch < 0:
            raise ConfigError(f"data.prefetch must be >= 0, got {self.data.prefetch}")
        if self.optim.z_loss < 0:
            raise ConfigError(f"optim.z_loss must be >= 0 (0 = off; PaLM uses 1e-4), got {self.optim.z_loss}")
        if self.optim.decay_style not in ("cosine", "linear", "constant"):
            raise ConfigError(f"optim.decay_style must be cosine, linear or constant, got {self.optim.decay_style!r}")
        if self.optim.warmup_steps >= s.steps:
            raise ConfigError(f"optim.warmup_steps {self.optim.warmup_steps} must be below schedule.steps {s.steps}")
        if b.global_batch_size % (b.micro_batch_size * self.parallel.dp):
            raise ConfigError(f"batch.global_batch_size {b.global_batch_size} is not a multiple of "
                              f"micro_batch_size x dp = {b.micro_batch_size} x {self.parallel.dp}")
        for name in ("steps", "log_interval", "checkpoint_interval", "keep_checkpoints"):
            if getattr(s, name) < 1:
                raise ConfigError(f"schedule.{name} must be >= 1, got {getattr(s, name)}")
        if s.checkpoint_format not in ("sharded", "gathered"):
            raise ConfigError(f"schedule.checkpoint_format must be sharded or gathered, got {s.checkpoint_format!r}")
        if self.remote.download_attempts < 1:
            raise ConfigError(f"remote.download_attempts must be >= 1, got {self.remote.download_attempts}")
        if self.lineage.detail not in ("digest", "full"):
            raise ConfigError(f"lineage.detail must be digest or full, got {self.lineage.detail!r}")
        ev = self.evaluation
        if ev.interval < 0 or ev.max_examples < 0 or ev.batch_size < 1:
            raise ConfigError("evaluation.interval and evaluation.max_examples must be >= 0 and evaluation.batch_size "
                              f">= 1, got {ev.interval}, {ev.max_examples}, {ev.batch_size}")
        if not 0 <= self.limits.memory_fraction <= 1:
            raise ConfigError(f"limits.memory_fraction must be in [0, 1] (0 = no check), got {self.limits.memory_fraction}")
        if self.remote.drain_timeout_s < 0:
            raise ConfigError(f"remote.drain_timeout_s must be >= 0, got {self.remote.drain_timeout_s}")

    @property
    def grad_accumulation(self) -> int:
        """Micro-batches per optimizer step on each data-parallel rank."""
        return self.batch.global_batch_size // (self.batch.micro_batch_size * self.parallel.dp)


def load_trainer_config(overrides: Iterable[str] = ()) -> TrainerConfig:
    return load("trainer", TrainerConfig, overrides)
