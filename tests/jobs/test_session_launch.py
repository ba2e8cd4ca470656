"""A job's Spark session under spark-submit keeps what spark-submit was given: its --master and --jars, not
conf/jobs.yaml's master and our jars folder; Google's gs connector among those jars still gets the settings a Spark
of Hadoop 3.5 needs for it (`GCS_CONNECTOR_CONF`), except where the command line set them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conf.paths import load_paths
from jobs.base import GCS_CONNECTOR_CONF

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
from conf.paths import load_paths
from jobs.base import build_session
from jobs.config import load_jobs_config

spark, created = build_session(load_jobs_config(), load_paths(), None, "launch-probe")
conf = spark.sparkContext.getConf()
print("PROBE " + json.dumps({"created": created, "master": spark.sparkContext.master,
                             "jars": [j for j in conf.get("spark.jars", "").split(",") if j],
                             "gs": {k: conf.get(k, None) for k in %r}}))
spark.stop()
"""


def test_spark_submit_keeps_its_master_and_jars_and_the_gs_connector_gets_its_settings(tmp_path):
    jars = sorted(Path(load_paths().spark_jars_dir).glob("*.jar"))
    connector = [jar for jar in jars if jar.name.startswith("gcs-connector-")]
    assert connector, "make jars puts gcs-connector in the jars folder"
    given = connector + [jar for jar in jars if jar.name.startswith("delta-")][:1]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE % (list(GCS_CONNECTOR_CONF),))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("WEBLM_CONF_OVERLAY", None)
    done = subprocess.run([str(bin_dir / "spark-submit"), "--master", "local[1]", "--jars", ",".join(map(str, given)),
                           "--conf", "spark.hadoop.fs.gs.block.size=1048576", str(probe)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("PROBE "))[len("PROBE "):])
    assert seen["created"] and seen["master"] == "local[1]"          # conf/jobs.yaml says local[2]
    assert [Path(jar).name for jar in seen["jars"]] == [jar.name for jar in given]   # not the folder's 40-odd jars
    assert seen["gs"] == {**GCS_CONNECTOR_CONF, "spark.hadoop.fs.gs.block.size": "1048576"}  # the command line wins


def test_a_spark_without_delta_lake_stops_before_any_work_saying_how_to_add_it(tmp_path):
    """A job on a Spark that has no Delta jars (none in paths.spark_jars_dir, none given at launch) used to fail at
    its first table read, deep inside the job, with DATA_SOURCE_NOT_FOUND and a Java stack."""
    from jobs.base import DELTA_PACKAGE
    from jobs.deploy import delta_package
    assert DELTA_PACKAGE == delta_package()   # the package the message names is the one jobs/jars/pom.xml pins
    (tmp_path / "no-jars").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("WEBLM_CONF_OVERLAY", None)
    done = subprocess.run([sys.executable, "-m", "jobs.ingest", "-o", f"paths.var={tmp_path / 'var'}",
                           "-o", f"paths.spark_jars_dir={tmp_path / 'no-jars'}", "-o", "spark.master=local[1]"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 2   # a setting that cannot work: one line, no traceback
    assert "\njobs.ingest: this Spark cannot load Delta Lake" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert f"--packages {DELTA_PACKAGE}" in done.stderr and "make jars" in done.stderr
    assert "DATA_SOURCE_NOT_FOUND" not in done.stderr
    # nothing written: no table, and the lake's lease (taken before the session) released
    assert not [p for p in (tmp_path / "var" / "lake").rglob("*") if p.is_file()]


def test_a_job_command_with_a_setting_that_cannot_work_says_so_in_one_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args, says in ((["-o", "extract.no_such_setting=1"], "unknown setting(s) ['no_such_setting'] in jobs.extract"),
                       (["-o", "storage.s3.endpont_url=http://minio:9000"], "unknown setting(s) ['endpont_url']")):
        done = subprocess.run([sys.executable, "-m", "jobs.extract", *args], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=120)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert done.stderr.startswith("jobs.extract: ") and says in done.stderr
