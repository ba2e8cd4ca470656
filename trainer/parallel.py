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
    vp: int = 1    # model chunks per pipeline stage: megatron's interleaved 1F1B schedule when > 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "cp", "dp", "world_size", "vp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ParallelDimsError(f"parallel.{name} must be a positive integer, got {value!r}")
        product = self.tp * self.pp * self.cp * self.dp
        if product != self.world_size:
            raise ParallelDimsError(
                f"tp*pp*cp*dp = {self.tp}*{self.pp}*{self.cp}*{self.dp} = {product} but the world size is "
                f"{self.world_size}; set parallel.dp to world_size/(tp*pp*cp) or launch {product} processes")
        if self.vp > 1 and self.pp == 1:
            raise ParallelDimsError(f"parallel.vp={self.vp} interleaves model chunks over pipeline stages, but "
                                    "parallel.pp=1: set parallel.pp > 1 or parallel.vp=1")

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
        """Pipeline stages (and their virtual chunks) hold equal numbers of transformer layers (megatron's
        default split)."""
        chunks = self.pp * self.vp
        if num_layers % chunks:
            what = f"parallel.pp={self.pp} pipeline stages" + (f" x parallel.vp={self.vp} chunks" if self.vp > 1 else "")
            raise ParallelDimsError(
                f"model.num_layers={num_layers} does not split evenly over {what}; choose a layout whose "
                f"pp*vp divides {num_layers}")

    def require_interleavable(self, micro_batches: int) -> None:
        """megatron's interleaved schedule runs the micro-batches of a step in groups of pp (schedules.py's
        `microbatch_group_size_per_vp_stage` checks): a step needs a whole number of groups."""
        if self.vp > 1 and micro_batches % self.pp:
            raise ParallelDimsError(
                f"parallel.vp={self.vp} (the interleaved schedule) needs the micro-batches per step and data-parallel "
                f"rank, global_batch_size/(micro_batch_size*dp) = {micro_batches}, to be a multiple of "
                f"parallel.pp={self.pp}; change batch.global_batch_size or batch.micro_batch_size")
