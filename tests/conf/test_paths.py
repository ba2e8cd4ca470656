"""conf/paths.py: every path resolved once, from an explicit root, to an absolute path or a URI."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conf import CONF_DIR, ConfigError, build, read_section
from conf.paths import Paths, load_paths

CHECKOUT = CONF_DIR.parent


def test_relative_paths_are_relative_to_the_checkout_not_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBLM_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    paths = load_paths()
    assert paths.root == str(CHECKOUT)
    assert paths.warc_dir == str(CHECKOUT / "var" / "warc")
    assert paths.lake == str(CHECKOUT / "var" / "lake")


def test_the_same_paths_from_any_folder_and_any_process(tmp_path, monkeypatch):
    """The spider, the jobs and the trainer all resolve through load_paths: run from trainer/, they agree."""
    monkeypatch.delenv("WEBLM_ROOT", raising=False)
    code = "from conf.paths import load_paths; p = load_paths(); print(p.warc_dir, p.lake, p.train_dir)"
    outputs = {subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                              check=True, env={"PYTHONPATH": str(CHECKOUT), "PATH": "/usr/bin:/bin"}).stdout
               for cwd in (CHECKOUT, CHECKOUT / "trainer", tmp_path)}
    assert len(outputs) == 1


def test_root_from_the_environment_or_the_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBLM_ROOT", str(tmp_path / "env-root"))
    assert load_paths().warc_dir == str(tmp_path / "env-root" / "var" / "warc")
    assert load_paths(root=tmp_path / "arg-root").warc_dir == str(tmp_path / "arg-root" / "var" / "warc")


def test_uris_pass_through_and_s3a_is_spelled_s3(tmp_path):
    paths = load_paths(["var=s3a://bucket/run/"], root=tmp_path)
    assert paths.var == "s3://bucket/run"
    assert paths.warc_dir == "s3://bucket/run/warc"
    assert paths.table("bronze.pages") == "s3://bucket/run/lake/bronze/pages"
    assert paths.mlflow_artifacts == "s3://bucket/run/mlflow/artifacts"
    # what must be on local disk stays local when var moves to object storage
    assert paths.local == str(tmp_path / "var")
    assert paths.mlflow_tracking_uri == f"sqlite:///{tmp_path}/var/mlflow/mlflow.db"
    assert paths.warc_buffer == str(tmp_path / "var" / "warc-buffer")


def test_local_state_on_object_storage_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="paths.local.*must be on this machine's disk"):
        load_paths(["local=s3://bucket/x"], root=tmp_path)
    with pytest.raises(ConfigError, match="sqlite store must be a local file"):
        load_paths(["mlflow_tracking_uri=sqlite:///s3://bucket/m.db"], root=tmp_path)


def test_a_packaged_configuration_refuses_relative_paths(tmp_path, monkeypatch):
    """Installed as the cluster wheel, conf/ sits in site-packages: relative paths would land there."""
    packaged = tmp_path / "lib" / "python3.11" / "site-packages" / "conf"
    shutil.copytree(CONF_DIR, packaged, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setenv("WEBLM_CONF_DIR", str(packaged))
    monkeypatch.delenv("WEBLM_ROOT", raising=False)
    with pytest.raises(ConfigError, match="relative.*installed package.*WEBLM_ROOT"):
        load_paths()
    assert load_paths(["var=s3://bucket/run", "local=/tmp/weblm-local"]).lake == "s3://bucket/run/lake"


def test_every_config_dataclass_takes_its_values_from_yaml_only():
    """Defaults live once, in conf/*.yaml: the dataclasses carry types, not values."""
    from demo.config import DemoConfig
    from jobs.config import JobsConfig
    from localweb.config import LocalWebConfig
    from spider.config import CrawlConfig
    from storage.config import StorageConfig
    from trainer.config import TrainerConfig

    def walk(cls):
        for f in dataclasses.fields(cls):
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, \
                f"{cls.__name__}.{f.name} has a default in code"
            if dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None):
                walk(f.type)

    for cls, section in ((DemoConfig, "demo"), (JobsConfig, "jobs"), (LocalWebConfig, "localweb"),
                         (CrawlConfig, "crawl"), (StorageConfig, "storage"), (TrainerConfig, "trainer")):
        walk(cls)
        build(cls, read_section(section), where=section)  # the YAML provides every value


def test_a_setting_missing_from_yaml_is_named(tmp_path, monkeypatch):
    for path in Path(CONF_DIR).glob("*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    text = (tmp_path / "paths.yaml").read_text().splitlines()
    (tmp_path / "paths.yaml").write_text("\n".join(l for l in text if not l.startswith("cache_dir")) + "\n")
    monkeypatch.setenv("WEBLM_CONF_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"missing setting\(s\) \['cache_dir'\] in paths"):
        load_paths()


def test_paths_has_no_defaults_either():
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(Paths))
