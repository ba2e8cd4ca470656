"""How the world is cut into tensor, pipeline, context and data parallel groups (torchtitan's ParallelDims).

The model knows nothing about parallelism; the backend reads this object to set up megatron's
process groups, and the data loader reads `dp_rank`/`dp` to take its slice of each global batch.
"""
from __future__ import annotations

from dataclasses import dataclass

from conf import ConfigError


class ParallelDimsError(ConfigError):
    """A parallel layout that does not fit the world it is asked to run on."""


@dataclass(frozen=True)
class ParallelDims:
    tp: int
    pp: int
    cp: int
    dp: int
    world_size: int

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "dp", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ParallelDimsError(f"parallel.{name} must be a positive integer, got {value!r}")
        product = self.tp * self.pp * self.cp * self.dp
        if product != self.world_size:
            raise ParallelDimsError(
                f"tp*pp*cp*dp = {self.tp}*{self.pp}*{self.cp}*{self.dp} = {product} but the world size is "
                f"{self.world_size}; set parallel.dp to world_size/(tp*pp*cp) or launch {product} processes")

    @property
    def model_parallel(self) -> int:
        """Ranks that hold one copy of the model between them."""
        return self.tp * self.pp * self.cp

    def require_cpu_layout(self) -> None:
        """The cpu backend runs tensor, pipeline and data parallel (gloo); context parallel needs the cuda one."""
        if self.cp > 1:
            raise ParallelDimsError(
                f"the cpu backend runs tensor, pipeline and data parallelism, got cp={self.cp}: megatron-core's "
                "context-parallel attention needs Transformer Engine; use the cuda backend")

    def require_model_split(self, num_layers: int) -> None:
        """Pipeline stages hold equal numbers of transformer layers (megatron's default split)."""
        if num_layers % self.pp:
            raise ParallelDimsError(
                f"model.num_layers={num_layers} does not split evenly over parallel.pp={self.pp} pipeline "
                f"stages; choose a pp that divides {num_layers}")
