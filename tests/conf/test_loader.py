"""The typed configuration loader: files, overlays, overrides, and the errors a user sees."""
from dataclasses import dataclass, field

import pytest
import yaml

from conf import ConfigError, build, flatten, load, split_paths_overrides
from conf.paths import load_paths


@dataclass
class Inner:
    rate: float = 1.0
    names: list[str] = field(default_factory=list)


@dataclass
class Outer:
    size: int = 1
    inner: Inner = field(default_factory=Inner)
    note: str | None = None


def write_section(tmp_path, name, text):
    (tmp_path / f"{name}.yaml").write_text(text)


def test_file_overlay_and_override_apply_in_order(tmp_path, monkeypatch):
    write_section(tmp_path, "toy", "size: 2\ninner:\n  rate: 3\n  names: [a]\n")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("toy:\n  inner:\n    names: [b, c]\nother:\n  size: 99\n")
    monkeypatch.setenv("WEBLM_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(overlay))

    cfg = load("toy", Outer, ["size=5", "toy.note=hello"])

    assert cfg == Outer(size=5, inner=Inner(rate=3.0, names=["b", "c"]), note="hello")
    assert isinstance(cfg.inner.rate, float)


def test_unknown_key_is_named_in_the_error(tmp_path, monkeypatch):
    write_section(tmp_path, "toy", "size: 2\nszie: 3\n")
    monkeypatch.setenv("WEBLM_CONF_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['szie'\] in toy"):
        load("toy", Outer)


def test_wrong_type_is_rejected():
    with pytest.raises(ConfigError, match="inner.rate must be float"):
        build(Outer, {"inner": {"rate": "fast"}}, where="toy")


def test_override_needs_key_and_value(tmp_path, monkeypatch):
    write_section(tmp_path, "toy", "size: 2\n")
    monkeypatch.setenv("WEBLM_CONF_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="not key=value"):
        load("toy", Outer, ["size"])


def test_missing_section_file_says_which(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBLM_CONF_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="no configuration file .*nothing.yaml"):
        load("nothing", Outer)


def test_paths_follow_the_var_root(tmp_path):
    paths = load_paths([f"var={tmp_path}"])
    assert paths.warc_dir == f"{tmp_path}/warc"
    assert paths.table("silver.documents") == f"{tmp_path}/lake/silver/documents"
    assert paths.mlflow_tracking_uri == f"sqlite:///{tmp_path}/mlflow/mlflow.db"
    assert paths.spark_jars_dir.endswith("/.venv/jars") and paths.spark_jars_dir.startswith("/")


def test_flatten_names_nested_settings():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_paths_prefix_routes_an_override_to_the_paths_section():
    assert split_paths_overrides(["steps=3", "paths.var=/tmp/x", "model.hidden=8"]) == (
        ["steps=3", "model.hidden=8"], ["var=/tmp/x"])


def test_a_storage_override_on_any_command_line_holds_for_the_whole_process(monkeypatch):
    """`-o storage.…` is taken by every CLI (the jobs', the trainer's, the crawl's), not refused as a setting of
    the part: storage is read wherever an object store is reached.  It lives in $WEBLM_CONF_INLINE, which child
    processes inherit and a Spark job ships to its workers, and the storage module reads it at once."""
    import storage
    from conf import INLINE_ENV, shipped_settings

    monkeypatch.setenv(INLINE_ENV, "")   # restored after the test: it is what the overrides below set
    before = storage._config().s3
    part, paths = split_paths_overrides(["steps=3", "storage.s3.endpoint_url=http://minio.internal:9000",
                                         "paths.var=s3://lake", "storage.s3.path_style=true"])
    assert (part, paths) == (["steps=3"], ["var=s3://lake"])
    now = storage._config().s3
    assert (now.endpoint_url, now.path_style) == ("http://minio.internal:9000", True)
    assert now.region == before.region   # the rest of the section stays as the files say
    assert storage.storage_options("s3")["client_kwargs"]["endpoint_url"] == "http://minio.internal:9000"
    shipped = yaml.safe_load(shipped_settings())["storage"]
    assert shipped["s3"]["endpoint_url"] == "http://minio.internal:9000" and shipped["s3"]["region"] == before.region
    # a misspelt key is refused when given, and changes nothing
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['endpont_url'\] in storage.s3"):
        split_paths_overrides(["storage.s3.endpont_url=http://elsewhere"])
    assert storage._config().s3.endpoint_url == "http://minio.internal:9000"
    with pytest.raises(ConfigError, match=r"'storage.s3' is not one of \['storage'\].key=value"):
        split_paths_overrides(["storage.s3"])
