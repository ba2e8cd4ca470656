"""A quality job killed with SIGKILL, at two points of a run, then rerun: its tables end identical to those of an
uninterrupted run over the same input (the job is incremental: a rerun picks up what the killed run committed)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import SMALL_DATA_SPARK
from test_quality_job import DOCS, prose, read, run, write_documents

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("silver.signals", "silver.quality")


def rows(spark, lake) -> dict[str, list[dict]]:
    return {name: sorted((r.asDict() for r in read(spark, lake, name).collect()), key=lambda r: r["doc_id"])
            for name in TABLES}


def version(spark, lake, name: str) -> int:
    from delta.tables import DeltaTable

    layer, _, table = name.partition(".")
    return DeltaTable.forPath(spark, str(lake / layer / table)).history(1).first()["version"]


def kill_at(point: str, lake: Path, tmp_path: Path) -> None:
    """Run the job in its own process group until it reaches `point`, then SIGKILL the group (driver and JVM)."""
    marker, log = tmp_path / f"{point}.reached", tmp_path / f"{point}.log"
    # A JVM killed with SIGKILL runs no shutdown hook, so Spark's scratch (70 MB of jars copied into userFiles, native
    # libraries) would stay in /tmp after every run: it goes under tmp_path, which pytest rotates.
    scratch = tmp_path / f"{point}.spark-scratch"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_DIRS": str(scratch),
           "PYSPARK_SUBMIT_ARGS": f"--driver-memory 1g --driver-java-options -Djava.io.tmpdir={scratch} "
                                  f"{SMALL_DATA_SPARK} pyspark-shell"}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("quality_kill_hook.py")), point, str(marker),
             "--lake", str(lake), "--master", "local[2]", "-o", "spark.shuffle_partitions=2"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        reached = marker.exists()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert reached, f"the job never reached {point}:\n{log.read_text()[-3000:]}"
    assert process.returncode == -signal.SIGKILL
    assert any(scratch.glob("spark-*")), "Spark's scratch went elsewhere than SPARK_LOCAL_DIRS"


def test_a_killed_quality_job_reruns_to_the_tables_of_an_uninterrupted_run(spark, tmp_path):
    straight = tmp_path / "straight" / "lake"
    write_documents(spark, straight, DOCS)
    assert run(straight).status == "ok"
    killed = tmp_path / "killed" / "lake"
    shutil.copytree(straight, killed)        # both lakes hold the same tables after a first complete run

    # new input: one text changed, one document added, one gone; the uninterrupted run takes it in one go
    changed = {**{k: v for k, v in DOCS.items() if k != "binary"}, "en-short": prose("en", 5), "extra": prose("en", 6)}
    for lake in (straight, killed):
        write_documents(spark, lake, changed)
    assert run(straight).status == "ok"
    expected = rows(spark, straight)
    assert {r["doc_id"] for r in expected["silver.quality"]} == {"en-good", "en-pii", "de-good", "en-short", "extra"}

    before = {name: version(spark, killed, name) for name in TABLES}
    kill_at("signals_write", killed, tmp_path)     # killed with the new signals scored but not committed
    assert {name: version(spark, killed, name) for name in TABLES} == before
    kill_at("decide", killed, tmp_path)            # killed with silver.signals committed, silver.quality stale
    assert version(spark, killed, "silver.signals") == before["silver.signals"] + 1
    assert version(spark, killed, "silver.quality") == before["silver.quality"]
    assert rows(spark, killed)["silver.signals"] == expected["silver.signals"]
    assert rows(spark, killed)["silver.quality"] != expected["silver.quality"]

    rerun = run(killed)
    assert rerun.status == "ok" and rerun.extra["signals_computed"] == 0   # the committed signals are kept
    assert rows(spark, killed) == expected
