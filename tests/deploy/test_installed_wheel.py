"""weblm as clusters run it: built into a wheel (`make wheel`) and installed apart from the checkout.

A crawl worker's image (`pip install '.[spider]'`, docs/crawl-cluster.md), a Spark cluster's nodes (deploy/) and a
GPU cluster's login node get the project from its wheel, where nothing of the checkout is on the path: every file the
packages read at run time must be inside it.  Here the wheel is built from the project's own files, installed into a
folder of its own, and run from an empty folder with that folder alone on PYTHONPATH (the test's virtualenv gives
the third-party packages): a crawl on a Redis frontier (its Lua scripts), the extraction over the crawl's pages
(the job's settings, its sandbox child), the whole pipeline as a Databricks wheel task runs it, a few training steps
on its shards, and the trainer's launch files."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import redis
from warcio.archiveiterator import ArchiveIterator

from localweb import LocalWeb, load_config
from tests.support.redisserver import RedisServer

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("conf", "storage", "tdmrep", "localweb", "spider", "jobs", "trainer", "demo")  # setup.cfg's packages.find
# Files of the package folders that stay in the checkout, and why.
CHECKOUT_ONLY = {
    "jobs/jars/pom.xml": "`make jars` resolves the local Spark's jars from it; a cluster gets Delta with --packages",
}
WEB = ["pages_per_host=3", "index_page_size=4", "slow_page_seconds=1", "large_page_bytes=100000"]
CRAWL = ["download_delay_s=0.01", "randomize_delay=false", "download_timeout_s=3", "retry_times=0",
         "log_level=INFO", "frontier.ssrf_allow=[127.0.0.1]"]


def project_files() -> list[str]:
    """The checkout's files as git sees them (tracked, and new ones not ignored): what a commit of it would build."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    return sorted(name for name in listed if name and (ROOT / name).is_file())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel, the folder it is installed in), built from a copy of the project's files: a build in the
    checkout would leave build/ and an egg-info there, under the other test workers' feet."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    for name in project_files():
        if name in ("setup.cfg", "pyproject.toml") or name.split("/")[0] in PACKAGES:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    # no build isolation: setuptools from this virtualenv, nothing fetched
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp / "dist"), str(source)], check=True, capture_output=True)
    (built,) = (tmp / "dist").glob("weblm-*.whl")
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(built)],
                   check=True, capture_output=True)
    return built, site


def run_installed(site: Path, cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python ARGS` from an empty folder, weblm from the installed wheel alone (WEBLM_ROOT: an installed package
    refuses relative paths)."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(site), "WEBLM_ROOT": str(cwd / "root"), "WEBLM_CONF_OVERLAY": ""}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_holds_every_file_of_its_packages(wheel):
    built, _ = wheel
    with zipfile.ZipFile(built) as archive:
        inside = set(archive.namelist())
    ours = [name for name in project_files() if name.split("/")[0] in PACKAGES and name not in CHECKOUT_ONLY]
    assert any(name.endswith(".lua") for name in ours) and any(name.startswith("trainer/templates/") for name in ours)
    missing = [name for name in ours if name not in inside]
    assert not missing, f"the wheel lacks {missing}"
    assert not [name for name in inside if "__pycache__" in name or name.startswith(("tests/", "bench/"))]


def test_the_installed_packages_are_the_wheels(wheel, tmp_path):
    _, site = wheel
    probe = ("import json, conf, spider.frontier.redis_backend as rb, trainer.launch as tl, jobs.text.main_text as mt;"
             "print(json.dumps([conf.CONF_DIR.as_posix(), rb.LUA.as_posix(), tl.TEMPLATES.as_posix(), mt.__file__]))")
    done = run_installed(site, tmp_path / "run", "-c", probe)
    assert done.returncode == 0, done.stderr[-3000:]
    for path in json.loads(done.stdout):
        assert Path(path).is_relative_to(site) and Path(path).exists(), path


@pytest.fixture(scope="module")
def crawled(wheel, tmp_path_factory) -> Path:
    """A crawl of the local web's news host run from the wheel on a real redis-server (the Redis frontier loads its
    Lua scripts from the package): its folder, with warc/, stats.json and redis_keys.json."""
    _, site = wheel
    run = tmp_path_factory.mktemp("crawled")
    server = RedisServer(run / "redis")
    try:
        with LocalWeb(load_config(WEB)) as web:
            seeds = [s for s in web.seeds if s.startswith("http://news.")]
            (run / "warc").mkdir(parents=True)
            (run / "seeds.txt").write_text("\n".join(seeds) + "\n")
            args = ["-m", "spider.crawl", "--seeds", "seeds.txt", "--warc-dir", str(run / "warc"),
                    "--stats", str(run / "stats.json"), "-o", f"proxy={web.proxy_url}",
                    "-o", f"frontier.url={server.url}"]
            for item in CRAWL:
                args += ["-o", item]
            crawl = run_installed(site, run, *args)
        assert crawl.returncode == 0, (crawl.stdout + crawl.stderr)[-3000:]
        assert "Traceback" not in crawl.stderr, crawl.stderr[-3000:]
        keys = redis.Redis.from_url(server.url).keys("*")
        (run / "redis_keys.json").write_text(json.dumps(len(keys)))
    finally:
        server.stop()
    return run


def test_a_crawl_on_a_redis_frontier_then_its_extraction_run_from_the_wheel(wheel, crawled, tmp_path):
    """The extraction reads conf/jobs.yaml from the package and starts its sandbox child from the installed
    modules."""
    _, site = wheel
    stats = json.loads((crawled / "stats.json").read_text())
    assert stats["finish_reason"] == "finished" and stats["pages_fetched"] >= 4
    assert json.loads((crawled / "redis_keys.json").read_text()) > 0, "the crawl did not run on the Redis frontier"
    pages = tmp_path / "pages"
    pages.mkdir()
    for path in sorted((crawled / "warc").glob("*.warc.gz")):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                url = record.rec_headers.get_header("WARC-Target-URI")
                body = record.content_stream().read()
                if (record.rec_type == "response" and record.http_headers.get_statuscode() == "200"
                        and "/articles/" in url):
                    name = f"page{len(list(pages.glob('*.html.gz'))):03d}"
                    (pages / f"{name}.html.gz").write_bytes(gzip.compress(body))
                    (pages / f"{name}.url").write_text(url + "\n")
    articles = sorted(pages.glob("*.html.gz"))
    assert len(articles) == 3, sorted(p.name for p in (crawled / "warc").iterdir())
    extracted = run_installed(site, tmp_path / "run", "-m", "jobs.text.extract_files", str(pages),
                              str(tmp_path / "out.jsonl"))
    assert extracted.returncode == 0, extracted.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == [p.name.split(".")[0] for p in articles]
    assert all(len(r["text"].split()) > 50 for r in rows), rows


def test_the_pipeline_as_a_wheel_task_then_training_run_from_the_wheel(wheel, crawled, tmp_path):
    """`weblm-pipeline`, the console script a Databricks wheel task calls, over the crawl's WARC file: every stage
    on local Spark, whose Python workers import the jobs from the install (Delta's jars given by folder, as a
    cluster ships them), then a few training steps on its shards.  A few documents make one shard whose valid
    share rounds to none (2 % of under 25 documents): the trainer leaves it out of the valid split and says so in
    result.json."""
    from conf.paths import load_paths
    _, site = wheel
    var = tmp_path / "var"
    jars = load_paths().spark_jars_dir   # the checkout's `make jars`
    pipeline = run_installed(site, tmp_path / "run", str(site / "bin" / "weblm-pipeline"), "-o", f"paths.var={var}",
                             "-p", f"warc_dir={crawled / 'warc'}", "-o", f"paths.spark_jars_dir={jars}",
                             "-o", "tokenize.vocab_size=400", "-o", "spark.master=local[1]", timeout=900)
    assert pipeline.returncode == 0, (pipeline.stdout + pipeline.stderr)[-3000:]
    assert "6/7 export ok" in pipeline.stdout and "7/7 maintain ok" in pipeline.stdout, pipeline.stdout[-3000:]
    manifest = json.loads((var / "shards" / "manifest.json").read_text())
    assert manifest["totals"]["documents"] >= 3 and len(manifest["shards"]) == 1   # the articles, the index page
    train = run_installed(site, tmp_path / "run", "-m", "trainer.train", "-o", f"paths.var={var}",
                          "-o", "schedule.steps=2", "-o", "optim.warmup_steps=1", timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    result = json.loads((var / "train" / "result.json").read_text())
    assert result["steps"] == 2 and result["shards_left_out"] == {"valid": [manifest["shards"][0]["prefix"]]}


def test_the_trainer_renders_its_launch_files_from_the_wheel(wheel, tmp_path):
    _, site = wheel
    layout = ["-o", "parallel.tp=8", "-o", "parallel.dp=2"]
    slurm = run_installed(site, tmp_path / "run", "-m", "trainer.launch", "slurm", "--nodes", "2",
                          "--gpus-per-node", "8", *layout)
    assert slurm.returncode == 0, slurm.stderr[-3000:]
    assert "#SBATCH --nodes=2" in slurm.stdout and "--nproc-per-node=8" in slurm.stdout
    k8s = run_installed(site, tmp_path / "run", "-m", "trainer.launch", "k8s", "--nodes", "2", "--gpus-per-node", "8",
                        "--image", "registry.example/weblm:1", *layout)
    assert k8s.returncode == 0, k8s.stderr[-3000:]
    assert "registry.example/weblm:1" in k8s.stdout
