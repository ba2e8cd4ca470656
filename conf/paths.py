"""The shared paths section (`conf/paths.yaml`), read by every part."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Iterable

from pathlib import Path

from conf import CONF_DIR, load


@dataclass(frozen=True)
class Paths:
    var: str = "var"
    seeds: str = "var/demo/seeds.txt"
    warc_dir: str = "var/warc"
    crawl_stats: str = "var/crawl/stats.json"
    lake: str = "var/lake"
    tokenizer_dir: str = "var/tokenizer"
    shards_dir: str = "var/shards"
    train_dir: str = "var/train"
    mlflow_tracking_uri: str = "sqlite:///var/mlflow/mlflow.db"
    mlflow_artifacts: str = "var/mlflow/artifacts"
    spark_jars_dir: str = ".venv/jars"

    def table(self, name: str) -> str:
        """`bronze.pages` -> `<lake>/bronze/pages`."""
        layer, _, table = name.partition(".")
        return f"{self.lake.rstrip('/')}/{layer}/{table}"


def load_paths(overrides: Iterable[str] = ()) -> Paths:
    """Load `conf/paths.yaml`; `{var}` in any path is replaced by the `var` setting."""
    paths = load("paths", Paths, overrides)
    resolved = {f.name: getattr(paths, f.name).replace("{var}", paths.var.rstrip("/"))
                for f in fields(paths) if f.name != "var"}
    # The jars are an install artifact of this checkout, wherever the caller runs from.
    jars = Path(resolved["spark_jars_dir"])
    resolved["spark_jars_dir"] = str(jars if jars.is_absolute() else CONF_DIR.parent / jars)
    return replace(paths, **resolved)
