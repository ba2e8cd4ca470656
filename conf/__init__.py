"""Typed configuration for every part of weblm.

Every default lives in a YAML file beside this module (`conf/<section>.yaml`),
one commented line per setting.  Code never reads YAML directly: it asks for a
dataclass with `load(section, Cls)`.  A deployment changes configuration, not
code, in one of three ways, applied in this order:

1. the section file itself (`conf/<section>.yaml`, or `$WEBLM_CONF_DIR/<section>.yaml`);
2. overlay files named in `$WEBLM_CONF_OVERLAY` (comma-separated YAML files whose
   top-level keys are section names), e.g. `conf/profiles/smoke.yaml`, then the YAML text of
   `$WEBLM_CONF_INLINE` (same shape: how a process hands its settings to the Spark workers it starts);
3. dotted overrides `key.sub=value` passed by the caller (command-line `-o`).

`storage` is the one section every part reads, lazily and on Spark's executors too (object stores): every
CLI takes its `-o storage.key=value` (`split_paths_overrides`), and a job's session ships the effective
storage settings to its Python workers (`shipped_settings`), which have neither the driver's overlay files
nor its command line.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
import os
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

import yaml

CONF_DIR = Path(__file__).resolve().parent
INLINE_ENV = "WEBLM_CONF_INLINE"
SHARED_SECTIONS = {"storage": "storage.config:StorageConfig"}   # read by every part, and by a Spark job's workers
T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration file or override that does not fit its dataclass."""


def conf_dir() -> Path:
    return Path(os.environ.get("WEBLM_CONF_DIR", CONF_DIR))


def read_section(section: str, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The merged raw mapping for one section: file, overlays, then overrides."""
    data = _merged(section, _inline())
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not key=value")
        if key.startswith(section + "."):
            key = key[len(section) + 1:]
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    return data


def load(section: str, cls: type[T], overrides: Iterable[str] = ()) -> T:
    """Load `conf/<section>.yaml` (plus overlays and overrides) into `cls`."""
    return build(cls, read_section(section, overrides), where=section)


def build(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build a (nested) dataclass from a mapping, rejecting unknown keys.
    Hand-written, not pydantic or dacite: every part imports conf (Spark executors too), so it needs PyYAML only."""
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ConfigError(f"unknown setting(s) {sorted(unknown)} in {where or cls.__name__}; "
                          f"known: {sorted(fields)}")
    missing = sorted(name for name, f in fields.items() if name not in data and f.init
                     and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    if missing:
        raise ConfigError(f"missing setting(s) {missing} in {where or cls.__name__}: every setting has its "
                          f"default in conf/{(where or '?').split('.')[0]}.yaml; add them there or in an overlay")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}" if where else name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc}") from exc


def split_paths_overrides(overrides: Iterable[str]) -> tuple[list[str], list[str]]:
    """Every CLI takes `-o key=value`; a `paths.` prefix sends it to `conf/paths.yaml` instead, and a `storage.`
    prefix sets it for the whole process (`set_shared`): storage is read wherever an object store is reached.

    Returns `(part_overrides, paths_overrides)`, the latter without the prefix.
    """
    part, paths, shared = [], [], []
    for item in overrides:
        if item.startswith("paths."):
            paths.append(item.removeprefix("paths."))
        elif item.split(".", 1)[0] in SHARED_SECTIONS:
            shared.append(item)
        else:
            part.append(item)
    set_shared(shared)
    return part, paths


def _merged(section: str, inline: Mapping[str, Any]) -> dict[str, Any]:
    """The section's file, then the overlay files, then `inline` (what `$WEBLM_CONF_INLINE` holds)."""
    path = conf_dir() / f"{section}.yaml"
    if not path.exists():
        raise ConfigError(f"no configuration file {path} for section {section!r}")
    data = yaml.safe_load(path.read_text()) or {}
    for overlay in filter(None, os.environ.get("WEBLM_CONF_OVERLAY", "").split(",")):
        overlay_data = yaml.safe_load(Path(overlay).read_text()) or {}
        _deep_merge(data, overlay_data.get(section) or {})
    _deep_merge(data, copy.deepcopy(inline.get(section) or {}))
    return data


def _inline() -> dict[str, Any]:
    text = os.environ.get(INLINE_ENV, "")
    data = yaml.safe_load(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ConfigError(f"${INLINE_ENV} holds no mapping of sections: {text[:80]!r}")
    return data


def set_shared(overrides: Iterable[str]) -> None:
    """Apply `section.key=value` overrides of the shared sections to this process and to what it starts (child
    processes; Spark's Python workers through `shipped_settings`), each section checked against its dataclass.

    They are kept in `$WEBLM_CONF_INLINE`, which `read_section` merges after the overlay files."""
    items = list(overrides)
    if not items:
        return
    inline = _inline()
    for item in items:
        key, sep, raw = item.partition("=")
        section, _, rest = key.strip().partition(".")
        if not sep or section not in SHARED_SECTIONS or not rest:
            raise ConfigError(f"override {item!r} is not one of {sorted(SHARED_SECTIONS)}.key=value")
        _set_dotted(inline.setdefault(section, {}), rest, yaml.safe_load(raw))
    for section in {item.split(".", 1)[0] for item in items}:   # a misspelt key fails here, not deep in a job
        module, _, name = SHARED_SECTIONS[section].partition(":")
        build(getattr(importlib.import_module(module), name), _merged(section, inline), where=section)
    os.environ[INLINE_ENV] = yaml.safe_dump(inline, sort_keys=True)


def shipped_settings() -> str:
    """`$WEBLM_CONF_INLINE` for Spark's Python workers: this process's effective shared sections (files, overlays,
    overrides), which hold on an executor that has only the wheel's conf/ and no overlay file."""
    return yaml.safe_dump({section: read_section(section) for section in SHARED_SECTIONS}, sort_keys=True)


def as_dict(obj: Any) -> dict[str, Any]:
    """A plain mapping of a config dataclass, for logging (MLflow params, summaries)."""
    return dataclasses.asdict(obj)


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`: how configs are logged as parameters."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, where) if len(args) == 1 else value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return build(hint, value, where)
    if origin in (list, tuple):
        (item,) = typing.get_args(hint)[:1] or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        items = [_coerce(item, v, where) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is Any or origin is not None:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not isinstance(value, hint):
        raise ConfigError(f"{where} must be {hint.__name__}, got {value!r}")
    return value


def _deep_merge(base: dict, extra: Mapping) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value


def _set_dotted(data: dict, key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {key!r}: {part!r} is not a section")
    node[leaf] = value
