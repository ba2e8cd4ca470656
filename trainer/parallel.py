"""How the world is cut into tensor, pipeline, context and data parallel groups (torchtitan's ParallelDims).

The model knows nothing about parallelism; the backend reads this object to set up megatron's
process groups, and the data loader reads `dp_rank`/`dp` to take its slice of each global batch.
"""
from __future__ import annotations

from dataclasses import dataclass


class ParallelDimsError(ValueError):
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

    def require_single_device(self, backend: str) -> None:
        """The cpu backend runs one process; anything else needs a backend that can split the model."""
        if (self.tp, self.pp, self.cp, self.dp) != (1, 1, 1, 1):
            raise ParallelDimsError(
                f"the {backend} backend runs tp=pp=cp=dp=1, got tp={self.tp} pp={self.pp} cp={self.cp} "
                f"dp={self.dp}; set them to 1 or use the cuda backend once it lands")
