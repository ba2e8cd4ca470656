"""Typed settings of the demo (`conf/demo.yaml`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from conf import load


@dataclass(frozen=True)
class DemoConfig:
    replay_warcs: list[str] = field(default_factory=list)
    spark_master: str = "local[2]"
    spark_driver_memory: str = "2g"
    fresh: bool = True
    stage_timeout_s: int = 1200
    localweb_start_timeout_s: int = 60


def load_demo_config(overrides: Iterable[str] = ()) -> DemoConfig:
    return load("demo", DemoConfig, overrides)
