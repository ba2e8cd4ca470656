"""Typed settings of the demo (`conf/demo.yaml`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import load


@dataclass(frozen=True)
class DemoConfig:
    replay_warcs: list[str]
    spark_driver_memory: str
    fresh: bool
    stage_timeout_s: int
    localweb_start_timeout_s: int


def load_demo_config(overrides: Iterable[str] = ()) -> DemoConfig:
    return load("demo", DemoConfig, overrides)
