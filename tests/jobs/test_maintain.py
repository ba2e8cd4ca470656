"""jobs.maintain, the pipeline's last stage: every Delta table of a lake compacted and vacuumed with its rows unchanged,
files a killed job left behind deleted, nothing done (and nothing committed) where nothing is due, export not fooled
by maintenance commits, and a damaged table reported without stopping the others."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conf import ConfigError
from conftest import pipeline_options
from jobs.export import ExportJob
from jobs.maintain import (LIST_PARALLELISM, OPTIMIZE_MIN_FILE_SIZE, RETENTION_CHECK, VACUUM_LOGGING, MaintainJob,
                           lake_tables, vacuum_due)

HOUR = 3600.0


def test_vacuum_is_due_only_when_a_commit_left_the_retention_window_since_the_last_vacuum():
    now, week = 1000 * HOUR, 168 * HOUR
    young = [(0, now - 5 * HOUR, "WRITE"), (1, now - HOUR, "MERGE")]
    assert not vacuum_due(young, now, week)                   # nothing the table stopped using is old enough
    old = [(0, now - 200 * HOUR, "WRITE"), (1, now - 171 * HOUR, "MERGE")]
    assert vacuum_due(old, now, week)
    vacuumed = old + [(2, now - 2 * HOUR, "VACUUM START"), (3, now - 2 * HOUR, "VACUUM END")]
    assert not vacuum_due(vacuumed, now, week)                # that vacuum already took both commits' files
    later = vacuumed + [(4, now - 169.5 * HOUR + 2 * HOUR, "OPTIMIZE")]
    assert not vacuum_due(later, now, week)                   # still inside the window
    assert vacuum_due(later, now + 2 * HOUR, week)            # two hours on, it left it
    assert vacuum_due(young, now, 0.0)                        # retention 0: every commit is out of the window


def table_files(table: Path) -> set[str]:
    return {p.relative_to(table).as_posix() for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}


def table_rows(spark, table: Path) -> list:
    df = spark.read.format("delta").load(str(table))
    return sorted(tuple(str(v) for v in row) for row in df.collect())


def versions(lake: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    return {name: DeltaTable(path).version() for name, path in lake_tables(str(lake))}


@pytest.fixture
def churned(spark, pipeline_runs, tmp_path):
    """A copy of the pipeline's lake after two rewrites that left unused files (silver.documents written again as 3
    files, bronze.pages as 2), plus a Parquet file no commit names, as a killed job leaves one."""
    var = tmp_path / "var"
    shutil.copytree(pipeline_runs.lake.parent, var)
    lake = var / "lake"
    for table, files in (("silver/documents", 3), ("bronze/pages", 2)):
        path = str(lake / table)
        rows = spark.read.format("delta").load(path).localCheckpoint()
        rows.repartition(files).write.format("delta").mode("overwrite").save(path)
    orphan = lake / "silver" / "quality" / "part-00000-killed-job.snappy.parquet"
    shutil.copy(next((lake / "silver" / "quality").glob("*.parquet")), orphan)
    return var


def run_maintain(var: Path, *overrides: str):
    argv = ["-o", f"paths.var={var}"]
    for item in overrides:
        argv += ["-o", item]
    return MaintainJob().run(argv)


def test_maintenance_compacts_and_vacuums_every_table_and_changes_no_row(spark, churned):
    from delta.tables import DeltaTable

    lake = churned / "lake"
    ExportJob().run(pipeline_options(churned, churned / "no-warc"))   # the copy's manifest names the copy's tables
    names = [name for name, _ in lake_tables(str(lake))]
    assert {"bronze.pages", "silver.documents", "gold.tokens", "gold.shard_lineage", "_ledger.extract"} <= set(names)
    rows = {name: table_rows(spark, lake / name.replace(".", "/")) for name in names}
    before = versions(lake)
    unused = {name: table_files(lake / name.replace(".", "/")) - {Path(f).name for f in spark.read.format("delta")
              .load(str(lake / name.replace(".", "/"))).inputFiles()} for name in names}
    assert unused["silver.documents"] and unused["bronze.pages"] and unused["silver.quality"]  # the fixture's work
    assert len(table_files(lake / "gold" / "tokens")) >= 2   # so compaction has something to do on gold.tokens
    manifest = (churned / "shards" / "manifest.json").read_text()

    metrics = run_maintain(churned, "maintain.retention_hours=0", "maintain.compact_min_files=2")

    assert metrics.status == "ok" and metrics.input_rows == metrics.output_rows == len(names)
    for name in names:
        table = lake / name.replace(".", "/")
        assert table_rows(spark, table) == rows[name], name             # not a row changed
        live = {Path(f).name for f in spark.read.format("delta").load(str(table)).inputFiles()}
        assert table_files(table) == live, name                         # every file on disk is one the table uses
        assert len(live) <= 1, name                                     # each small table is one file now
    report = json.loads((lake / "_metrics" / "maintain.json").read_text())
    assert report["files_vacuumed"] >= sum(len(u) for u in unused.values()) and report["bytes_vacuumed"] > 0
    assert report["tables"]["silver.documents"]["compacted_files"] == 3
    assert report["tables"]["silver.documents"]["compacted_into"] == 1
    operations = [r[0] for r in DeltaTable.forPath(spark, str(lake / "gold" / "tokens")).history()
                  .select("operation").collect()]
    assert operations[:3] == ["VACUUM END", "VACUUM START", "OPTIMIZE"]   # newest first: gold.tokens has new versions
    assert all(spark.conf.get(key, None) is None
               for key in (LIST_PARALLELISM, RETENTION_CHECK, VACUUM_LOGGING, OPTIMIZE_MIN_FILE_SIZE))

    # export sees through the maintenance commits: same rows, so no new shards and the same manifest
    export = ExportJob().run(pipeline_options(churned, churned / "no-warc"))
    assert export.status == "ok" and export.input_rows == 0
    assert (churned / "shards" / "manifest.json").read_text() == manifest

    after = versions(lake)
    assert all(after[name] > before[name] for name in names)
    again = run_maintain(churned, "maintain.retention_hours=0", "maintain.compact_min_files=2")
    assert again.status == "ok" and versions(lake) == after          # nothing left to do commits nothing
    assert again.extra["files_compacted"] == 0 and again.extra["files_vacuumed"] == 0


def live_files(spark, table: Path) -> set[str]:
    return {Path(f).name for f in spark.read.format("delta").load(str(table)).inputFiles()}


def test_lite_vacuum_deletes_what_the_log_retired_and_leaves_a_killed_jobs_file_to_a_full_one(spark, churned, caplog):
    lake = churned / "lake"
    documents, quality = lake / "silver" / "documents", lake / "silver" / "quality"
    orphan = quality / "part-00000-killed-job.snappy.parquet"
    assert table_files(documents) - live_files(spark, documents) and orphan.exists()
    lite = ("maintain.retention_hours=0", "maintain.compact_min_files=1000", "maintain.vacuum=lite",
            "maintain.tables=[silver.documents,silver.quality,bronze.pages]")
    # bronze.pages: a log that no longer reaches back to version 0 (checkpointed, its first commits cleaned up)
    pages = str(lake / "bronze" / "pages")
    spark.sql(f"ALTER TABLE delta.`{pages}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    spark.read.format("delta").load(pages).localCheckpoint().write.format("delta").mode("overwrite").save(pages)
    assert list((lake / "bronze" / "pages" / "_delta_log").glob("*.checkpoint.parquet"))
    (lake / "bronze" / "pages" / "_delta_log" / f"{0:020d}.json").unlink()

    metrics = run_maintain(churned, *lite)

    assert metrics.status == "ok"
    tables = metrics.extra["tables"]
    assert table_files(documents) == live_files(spark, documents)     # the files the log retired are gone
    assert orphan.exists() and tables["silver.quality"]["vacuum"] == "lite"   # no listing: nobody saw it
    assert tables["silver.documents"]["vacuum"] == "lite" and tables["silver.documents"]["vacuumed_files"] >= 3
    assert tables["bronze.pages"]["vacuum"] == "full"   # Delta refused LITE there: a full VACUUM instead, logged
    assert table_files(lake / "bronze" / "pages") == live_files(spark, lake / "bronze" / "pages")
    assert "Delta refused VACUUM LITE" in caplog.text and "DELTA_CANNOT_VACUUM_LITE" in caplog.text

    # a full VACUUM, once a commit has aged past the window since the last one, takes the killed job's file
    spark.read.format("delta").load(str(quality)).localCheckpoint().write.format("delta").mode("overwrite").save(
        str(quality))
    full = run_maintain(churned, "maintain.retention_hours=0", "maintain.tables=[silver.quality]")
    assert full.extra["tables"]["silver.quality"]["vacuum"] == "full" and not orphan.exists()


def test_on_a_young_lake_the_defaults_commit_nothing_and_keep_every_file(spark, churned):
    lake = churned / "lake"
    before = versions(lake)
    files = {name: table_files(lake / name.replace(".", "/")) for name in before}
    metrics = run_maintain(churned)   # retention 168 h, compaction from 50 files
    assert metrics.status == "ok" and metrics.output_rows == len(before)
    assert versions(lake) == before
    assert {name: table_files(lake / name.replace(".", "/")) for name in before} == files   # the orphan too: too young


def test_a_damaged_table_is_reported_and_the_others_are_still_maintained(spark, churned):
    lake = churned / "lake"
    log = lake / "silver" / "signals" / "_delta_log"
    for commit in log.glob("*.json"):
        commit.write_text("not a delta commit\n")
    for checksum in log.glob("*.crc"):
        checksum.unlink()
    with pytest.raises(RuntimeError, match=r"maintenance failed for 1 of \d+ tables \(the others are done\): "
                                           r"silver\.signals: failed: "):
        run_maintain(churned, "maintain.retention_hours=0", "maintain.compact_min_files=2")
    report = json.loads((lake / "_metrics" / "maintain.json").read_text())
    assert report["status"] == "failed" and report["skipped"] == {"table_failed": 1}
    assert report["tables"]["silver.documents"]["compacted_files"] == 3 and report["files_vacuumed"] > 0
    assert [e["table"] for e in report["skipped_examples"]] == ["silver.signals"]


def test_tables_that_are_not_in_the_lake_are_refused_before_any_work(churned):
    with pytest.raises(ConfigError, match=r"maintain.tables names \['silver.nope'\], which are not Delta tables"):
        run_maintain(churned, "maintain.tables=[silver.nope]")


def test_many_small_files_beside_a_large_one_are_compacted_and_the_large_one_is_left(spark, tmp_path):
    """Delta's auto-compaction rule: count the small files (sizes from the log), not the average size, which one large
    file would keep above the threshold."""
    var = tmp_path / "var"
    path = var / "lake" / "silver" / "mixed"
    spark.range(0, 100_000).selectExpr("id", "sha2(cast(id as string), 256) AS h").coalesce(1) \
        .write.format("delta").save(str(path))
    for i in range(4):
        spark.range(i, i + 1).selectExpr("id", "sha2(cast(id as string), 256) AS h") \
            .write.format("delta").mode("append").save(str(path))
    large = max(table_files(path), key=lambda name: (path / name).stat().st_size)
    sizes = sorted((path / name).stat().st_size for name in table_files(path))
    small_mib = sizes[-2] * 4 / 2 ** 20   # well above every small file, well under the large one ...
    assert sum(sizes) / len(sizes) > small_mib * 2 ** 20   # ... and under the average: the old rule did nothing
    rows = table_rows(spark, path)

    metrics = run_maintain(var, "maintain.compact_min_files=4", f"maintain.small_file_mib={small_mib}")

    table = metrics.extra["tables"]["silver.mixed"]
    assert (table["files"], table["small_files"], table["compacted_files"], table["compacted_into"]) == (5, 4, 4, 1)
    live = {Path(f).name for f in spark.read.format("delta").load(str(path)).inputFiles()}
    assert len(live) == 2 and large in live          # OPTIMIZE bin-packed the four small files, left the large one
    assert table_rows(spark, path) == rows
    again = run_maintain(var, "maintain.compact_min_files=4", f"maintain.small_file_mib={small_mib}")
    assert again.extra["tables"]["silver.mixed"]["compacted_files"] == 0   # one small file now: under the minimum
