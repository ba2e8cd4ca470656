"""The shared paths section (`conf/paths.yaml`), read by every part: the one place paths are resolved.

`load_paths()` turns every configured path into an absolute local path or a URI, once, from an
explicit root; no part resolves a path again.  The root is, in order: the `root` argument (a CLI's
`--root`), `$WEBLM_ROOT`, or the folder holding the conf/ folder the settings came from.  A packaged
conf/ (inside site-packages, as on a cluster) has no meaningful parent, so there relative paths are
refused with a message instead of silently landing in site-packages.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Iterable

from conf import CONF_DIR, ConfigError, conf_dir, load

ROOT_ENV = "WEBLM_ROOT"
# Settings that are not plain paths; `spark_jars_dir` is an install artifact of the checkout that runs
# the code, so it is resolved against that checkout, not against the run's root.
_NOT_PATHS = {"root", "mlflow_tracking_uri", "spark_jars_dir"}


@dataclass(frozen=True)
class _Settings:
    """conf/paths.yaml's settings as written (before resolution)."""
    var: str
    local: str
    seeds: str
    warc_dir: str
    warc_buffer: str
    crawl_stats: str
    lake: str
    tokenizer_dir: str
    shards_dir: str
    train_dir: str
    cache_dir: str
    train_staging: str
    mlflow_tracking_uri: str
    mlflow_artifacts: str
    spark_jars_dir: str


@dataclass(frozen=True)
class Paths(_Settings):
    """Every setting resolved: absolute local paths or URIs, and the root they were resolved from."""
    root: str

    def table(self, name: str) -> str:
        """`bronze.pages` -> `<lake>/bronze/pages` (a local path or a URI, like `lake`)."""
        layer, _, table = name.partition(".")
        return join(self.lake, layer, table)


def is_uri(path: str) -> bool:
    """True for object-store and other scheme-qualified locations (s3://, gs://, dbfs:/, ...)."""
    return "://" in path or path.startswith("dbfs:")


def join(base: str, *parts: str) -> str:
    """Join path segments with `/` for URIs and the OS separator for local paths."""
    if is_uri(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(base, *parts)


def resolve_root(root: str | os.PathLike | None = None) -> Path:
    """The folder relative paths are relative to (see the module docstring)."""
    chosen = root or os.environ.get(ROOT_ENV)
    if chosen:
        return Path(chosen).expanduser().resolve()
    here = conf_dir().resolve()
    if any(part in ("site-packages", "dist-packages") for part in here.parts):
        return Path()  # marks "no root": relative paths are refused in _absolute
    return here.parent


def _absolute(value: str, root: Path, key: str) -> str:
    value = value.strip()
    if value.startswith("file://"):
        value = value[len("file://"):]
    if value.startswith("s3a://") or value.startswith("s3n://"):
        value = "s3://" + value[len("s3a://"):]  # one spelling everywhere; Spark gets s3a:// from storage.spark_uri
    if is_uri(value):
        return value.rstrip("/")
    path = Path(value).expanduser()
    if not path.is_absolute():
        if root == Path():
            raise ConfigError(f"paths.{key}={value!r} is relative, and the configuration comes from an installed "
                              f"package ({conf_dir()}); set ${ROOT_ENV} (or --root), or make the path absolute or a URI")
        path = root / path
    return os.path.normpath(path)


def load_paths(overrides: Iterable[str] = (), root: str | os.PathLike | None = None) -> Paths:
    """`conf/paths.yaml` (+ overlays, + `key=value` overrides) with every path absolute or a URI."""
    base = resolve_root(root)
    raw = load("paths", _Settings, overrides)
    var = _absolute(raw.var, base, "var")
    local = _absolute(raw.local or (var if not is_uri(var) else "var"), base, "local")
    if is_uri(local):
        raise ConfigError(f"paths.local={raw.local!r} must be on this machine's disk (it holds MLflow's sqlite "
                          "store, caches and upload buffers); put object storage in paths.var")
    resolved = {"root": str(base) if base != Path() else "", "var": var, "local": local}
    for f in fields(_Settings):
        if f.name in ("var", "local"):
            continue
        value = getattr(raw, f.name).replace("{var}", var).replace("{local}", local)
        if f.name == "mlflow_tracking_uri":
            value = _tracking_uri(value, base)
        elif f.name == "spark_jars_dir":
            value = str(Path(value) if Path(value).is_absolute() else CONF_DIR.parent / value)
        else:
            value = _absolute(value, base, f.name)
        resolved[f.name] = value
    if is_uri(resolved["warc_buffer"]) or is_uri(resolved["cache_dir"]) or is_uri(resolved["train_staging"]):
        raise ConfigError("paths.warc_buffer, paths.cache_dir and paths.train_staging must be local folders")
    return Paths(**resolved)


def _tracking_uri(value: str, root: Path) -> str:
    """`sqlite:///relative/mlflow.db` -> `sqlite:////abs/mlflow.db`; other schemes unchanged."""
    if value.startswith("sqlite:///"):
        db = value[len("sqlite:///"):]
        if is_uri(db):
            raise ConfigError(f"paths.mlflow_tracking_uri={value!r}: MLflow's sqlite store must be a local file; "
                              "use {local} (or an http:// tracking server)")
        return "sqlite:///" + _absolute(db, root, "mlflow_tracking_uri")  # four slashes: an absolute path
    return value


def with_paths(paths: Paths, **changes: str) -> Paths:
    """A copy with some paths replaced; each new value must already be absolute or a URI."""
    for key, value in changes.items():
        if not (is_uri(value) or os.path.isabs(value)):
            raise ConfigError(f"with_paths: {key}={value!r} must be absolute or a URI")
    return replace(paths, **changes)
