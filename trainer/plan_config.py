"""What `python -m trainer.plan` plans: its settings (conf/trainer_plan.yaml, typed and checked), the model shape
(a preset or conf/trainer.yaml's model section) and the command line's flags and overrides that change them.
trainer/plan.py makes the estimates; trainer/plan_report.py prints them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import yaml

from conf import ConfigError, build, read_section
from trainer.flops import BF16_PEAK, bf16_peak

SECTION = "trainer_plan"
DAY_S = 86_400
GIB = 2 ** 30

# GPU memory in GiB, as torch.cuda.get_device_properties().total_memory reports it to the nearest GiB (HBM
# capacity from the vendors' datasheets).  Longest match first, like trainer/flops.py's BF16_PEAK: "GH200" is not
# "H200", and the 40 GB A100s are named so.
GPU_MEMORY_GIB = (("H100 PCIe", 80), ("H100 NVL", 94), ("GH200", 96), ("H100", 80), ("H200", 141), ("B200", 180),
                  ("A100-SXM4-40GB", 40), ("A100-PCIE-40GB", 40), ("A100", 80), ("L40S", 48), ("A10", 24))

# Bytes per parameter: (weights, gradients, optimizer states), the last divided by d x c when sharded.
BYTES_PER_PARAM = {"bf16": (2, 4, 12), "fp32": (4, 4, 8)}
RECOMPUTE = ("none", "selective", "full")


class PlanError(ValueError):
    """A model, cluster or layout the planner cannot plan: the message says what to change."""


# --- the inputs ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    gated_linear_unit: bool
    share_embeddings: bool
    normalization: str

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                     "vocab_size", "seq_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"model.{name} must be a positive whole number, got {value!r}")
        for name in ("gated_linear_unit", "share_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise PlanError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise PlanError(f"model.hidden_size {self.hidden_size} is not divisible by model.num_attention_heads "
                            f"{self.num_attention_heads}")
        if self.num_attention_heads % self.num_query_groups:
            raise PlanError(f"model.num_attention_heads {self.num_attention_heads} is not a multiple of "
                            f"model.num_query_groups {self.num_query_groups}")
        if self.normalization not in ("RMSNorm", "LayerNorm"):
            raise PlanError(f"model.normalization must be RMSNorm or LayerNorm, got {self.normalization!r}")

    @property
    def layer_params(self) -> int:
        h, norm = self.hidden_size, 1 if self.normalization == "RMSNorm" else 2
        attention = 2 * h * h * (self.num_attention_heads + self.num_query_groups) // self.num_attention_heads
        mlp = (3 if self.gated_linear_unit else 2) * h * self.ffn_hidden_size
        return attention + mlp + 2 * h * norm

    @property
    def non_embedding_params(self) -> int:
        """The transformer layers and the final norm: the N of the PaLM FLOPs formula."""
        return self.num_layers * self.layer_params + self.hidden_size * (1 if self.normalization == "RMSNorm" else 2)

    @property
    def params(self) -> int:
        tables = 1 if self.share_embeddings else 2
        return self.non_embedding_params + tables * self.vocab_size * self.hidden_size


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    cp: int
    dp: int
    virtual_stages: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def __str__(self) -> str:
        vp = f" VP {self.virtual_stages}" if self.virtual_stages > 1 else ""
        return f"TP {self.tp}, PP {self.pp}{vp}, CP {self.cp}, DP {self.dp}"


@dataclass(frozen=True)
class LayoutConfig:
    tp: int
    pp: int
    cp: int
    dp: int
    virtual_stages: int


@dataclass(frozen=True)
class MemoryConfig:
    precision: str
    distributed_optimizer: bool
    recompute: str
    sequence_parallel: bool
    flash_attention: bool
    usable_fraction: float
    vocab_multiple: int


@dataclass(frozen=True)
class ClusterConfig:
    num_gpus: int
    gpus_per_node: int
    gpu: str
    bf16_peak_tflops: float
    memory_gib: float
    intra_node_gb_s: float
    inter_node_gb_s: float
    price_per_gpu_hour: float

    def __post_init__(self) -> None:
        missing = []
        if not self.peak_flops:
            missing.append("its bf16 peak with -o cluster.bf16_peak_tflops=N")
        if not self.memory_bytes:
            missing.append("its memory with -o cluster.memory_gib=N")
        if missing:
            known = ", ".join(dict.fromkeys(name for name, _ in (*BF16_PEAK, *GPU_MEMORY_GIB)))
            raise PlanError(f"GPU {self.gpu!r} is not in trainer/flops.py's and trainer/plan_config.py's tables "
                            f"(known: {known}): give {' and '.join(missing)}")

    @property
    def peak_flops(self) -> float:
        return self.bf16_peak_tflops * 1e12 or bf16_peak(self.gpu) or 0.0

    @property
    def memory_bytes(self) -> float:
        return GIB * (self.memory_gib or next((size for name, size in GPU_MEMORY_GIB if name in self.gpu), 0))


@dataclass(frozen=True)
class ReliabilityConfig:
    failures_per_gpu_hour: float
    checkpoint_bytes_per_param: float
    checkpoint_write_gb_s: float
    restart_minutes: float


@dataclass(frozen=True)
class ScalingConfig:
    tokens_per_param: float
    loss_e: float
    loss_a: float
    loss_b: float
    alpha: float
    beta: float
    inference_tokens: float
    compute_flops: float


@dataclass(frozen=True)
class TrainerModelConfig:
    vocab_size: int
    gated_linear_unit: bool


@dataclass(frozen=True)
class PlanConfig:
    model: str
    tokens: float
    global_batch_tokens: int
    micro_batch_size: int
    mfu: float
    flops_formula: str
    layout: LayoutConfig
    memory: MemoryConfig
    cluster: ClusterConfig
    reliability: ReliabilityConfig
    scaling: ScalingConfig
    trainer_model: TrainerModelConfig
    presets: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        positive = {"tokens": self.tokens, "global_batch_tokens": self.global_batch_tokens,
                    "micro_batch_size": self.micro_batch_size, "cluster.num_gpus": self.cluster.num_gpus,
                    "cluster.gpus_per_node": self.cluster.gpus_per_node,
                    "cluster.intra_node_gb_s": self.cluster.intra_node_gb_s,
                    "cluster.inter_node_gb_s": self.cluster.inter_node_gb_s,
                    "layout.virtual_stages": self.layout.virtual_stages,
                    "memory.vocab_multiple": self.memory.vocab_multiple,
                    "reliability.failures_per_gpu_hour": self.reliability.failures_per_gpu_hour,
                    "reliability.checkpoint_bytes_per_param": self.reliability.checkpoint_bytes_per_param,
                    "reliability.checkpoint_write_gb_s": self.reliability.checkpoint_write_gb_s,
                    "scaling.tokens_per_param": self.scaling.tokens_per_param}
        for name, value in positive.items():
            if not value > 0:
                raise PlanError(f"{name} must be above 0, got {value!r}")
        at_least_zero = {"price_per_gpu_hour": self.cluster.price_per_gpu_hour,
                         "bf16_peak_tflops": self.cluster.bf16_peak_tflops, "memory_gib": self.cluster.memory_gib,
                         "restart_minutes": self.reliability.restart_minutes,
                         "inference_tokens": self.scaling.inference_tokens,
                         "compute_flops": self.scaling.compute_flops,
                         **{f"layout.{k}": v for k, v in asdict(self.layout).items()}}
        for name, value in at_least_zero.items():
            if value < 0:
                raise PlanError(f"{name} must be 0 or more, got {value!r}")
        if not 0 < self.mfu <= 1:
            raise PlanError(f"mfu is a fraction of the peak, above 0 and at most 1, got {self.mfu!r}")
        if not 0 < self.memory.usable_fraction <= 1:
            raise PlanError(f"memory.usable_fraction must be above 0 and at most 1, got {self.memory.usable_fraction}")
        choices = {"flops_formula": (self.flops_formula, ("6n", "palm")),
                   "memory.precision": (self.memory.precision, tuple(BYTES_PER_PARAM)),
                   "memory.recompute": (self.memory.recompute, RECOMPUTE)}
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise PlanError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


# --- the model to plan --------------------------------------------------------------------------------------------

SHAPE_KEYS = tuple(f for f in ModelShape.__dataclass_fields__)


def model_shape(cfg: PlanConfig, overrides: dict[str, Any]) -> ModelShape:
    """A preset, or conf/trainer.yaml's model section (with its overlays), then `model.KEY=VALUE` overrides."""
    if cfg.model == "trainer":
        section = read_section("trainer").get("model") or {}
        heads = section.get("num_attention_heads")
        data = {key: section[key] for key in SHAPE_KEYS if key in section}
        if not data.get("num_query_groups"):   # the trainer's 0 = one group per head
            data["num_query_groups"] = heads
        if "activation" in section:
            data["gated_linear_unit"] = section["activation"] == "swiglu"
        data = {**asdict(cfg.trainer_model), **data}
    elif cfg.model in cfg.presets:
        data = dict(cfg.presets[cfg.model])
    else:
        raise PlanError(f"unknown model {cfg.model!r}: a preset ({', '.join(sorted(cfg.presets))}) or `trainer` "
                        f"(conf/trainer.yaml's model section)")
    unknown = sorted(set(overrides) - set(SHAPE_KEYS))
    if unknown:
        raise PlanError(f"unknown model setting(s) {unknown}; known: {', '.join(SHAPE_KEYS)}")
    data.update(overrides)
    missing = sorted(set(SHAPE_KEYS) - set(data))
    if missing:
        raise PlanError(f"model {cfg.model!r} does not say {missing}; give them with -o model.KEY=VALUE")
    return ModelShape(**{key: data[key] for key in SHAPE_KEYS})


# --- the command line's settings --------------------------------------------------------------------------------------

FLAGS = {"model": "model", "gpus": "cluster.num_gpus", "gpu": "cluster.gpu", "tokens": "tokens", "mfu": "mfu",
         "price": "cluster.price_per_gpu_hour"}


def load_plan(flags: dict[str, Any], overrides: Iterable[str]) -> tuple[PlanConfig, ModelShape]:
    """conf/trainer_plan.yaml with its overlays, the flags, then -o overrides; and the model shape they name."""
    settings, shape = [], {}
    for item in [f"{FLAGS[k]}={v}" for k, v in flags.items() if v is not None] + list(overrides):
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not KEY=VALUE")
        if key.startswith("model."):
            shape[key[len("model."):]] = yaml.safe_load(_plain_number(raw))
        else:
            settings.append(f"{key}={_plain_number(raw)}")
    cfg = build(PlanConfig, read_section(SECTION, settings), where=SECTION)
    return cfg, model_shape(cfg, shape)


def _plain_number(raw: str) -> str:
    """15e12 and 2e3 are numbers here, though YAML 1.1 reads them as strings: write them as YAML numbers."""
    if not isinstance(yaml.safe_load(raw), str):
        return raw
    try:
        value = float(raw)
    except ValueError:
        return raw
    if not math.isfinite(value):
        return raw
    return str(int(value)) if value.is_integer() else repr(value)
