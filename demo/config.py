"""Typed settings of the demo (`conf/demo.yaml`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import ConfigError, load


@dataclass(frozen=True)
class DemoConfig:
    replay_warcs: list[str]
    spark_driver_memory: str
    fresh: bool
    stage_timeout_s: int
    localweb_start_timeout_s: int
    render_js: str
    quality_models: bool
    kenlm_vocab_size: int
    crawl_overrides: list[str]

    def __post_init__(self) -> None:
        if self.render_js not in ("auto", "always", "never"):
            raise ConfigError(f"demo.render_js must be auto, always or never, got {self.render_js!r}")


def load_demo_config(overrides: Iterable[str] = ()) -> DemoConfig:
    return load("demo", DemoConfig, overrides)
