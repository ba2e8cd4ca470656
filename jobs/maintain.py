"""Table maintenance, the pipeline's last stage: every Delta table of the lake compacted and vacuumed, rows unchanged.

    python -m jobs.maintain [--lake DIR] [-o maintain.retention_hours=168] [-o maintain.tables=[silver.quality]]
    spark-submit jobs/maintain.py ...

Every incremental run adds a few small files to each table it writes, and a MERGE that changes rows writes new
files while the old ones stay on disk for time travel: without maintenance a lake that runs daily grows by a copy of
its rewritten tables every day (`bench/lake_growth.py` measures it).  Per table (each `<lake>/<layer>/<table>` with
a `_delta_log`, `_ledger/*` included):

- compaction, Delta's own bin-packing OPTIMIZE, when at least `maintain.compact_min_files` of the table's files are
  under `maintain.small_file_mib` (Delta's auto-compaction rule; the sizes come from the table's log, read with
  delta-rs), so that a few large files do not hide many small ones;
- VACUUM `maintain.retention_hours` (Delta's default 7 days), run only when a commit has aged past the retention
  window since the table's last VACUUM (otherwise there is nothing it could delete, and listing the table's folder
  is the costly part); it also deletes files a killed job wrote but never committed.  With `maintain.vacuum: lite`
  it is Delta's VACUUM LITE, which reads the files to delete from the table's log instead of listing the folder
  (cheaper on object storage for tables of many files) and leaves a killed job's files to a full run; where Delta
  refuses LITE (the log no longer reaches back to the last VACUUM) the table gets a full one.

Both are Delta operations (delta-spark), nothing hand-written.  Neither changes a row: OPTIMIZE commits with
`dataChange=false`, and `jobs.base.data_changed_since` lets the stages that compare versions (export's manifest)
see through maintenance commits.  A table that fails is reported and the others are still maintained; the stage
then fails, naming it.  Lineage does not need the vacuumed files: `gold.shard_lineage` names each sequence's
`doc_id`, URL and WARC record, and time travel to versions older than the retention window ends here.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

import storage
from conf import ConfigError
from jobs.base import SparkJob, session_conf

log = logging.getLogger("weblm.jobs.maintain")

# Delta refuses a VACUUM retention below the tables' delta.deletedFileRetentionDuration (7 days) unless this is off
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# how many tasks list a table's folder for VACUUM (Delta reads Spark's partition-discovery setting, default 10,000)
LIST_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
# VACUUM records its START and END (files and bytes deleted) in the table's history; Delta leaves this off on S3, where
# concurrent commits need a DynamoDB log store: here the lake's lease already keeps other runs out
VACUUM_LOGGING = "spark.databricks.delta.vacuum.logging.enabled"
# OPTIMIZE rewrites every file under this (Delta's default 1 GiB): set to maintain.small_file_mib, so that compaction
# rewrites the small files only, as Delta's auto compaction does, not the table's large files with them
OPTIMIZE_MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"
# Delta's error condition when VACUUM LITE cannot find every deletable file in the log (maintain.vacuum: lite)
LITE_REFUSED = "DELTA_CANNOT_VACUUM_LITE"
DELTA_DEFAULT_RETENTION_HOURS = 168
_MIB = 1024 * 1024


def lake_tables(lake: str) -> list[tuple[str, str]]:
    """`(layer.table, path)` of every Delta table two levels under the lake, sorted by name."""
    found = []
    for layer in storage.listdir(lake):
        for table in storage.listdir(layer):
            if storage.exists(storage.join(table, "_delta_log")):
                found.append((f"{_base(layer)}.{_base(table)}", table))
    return sorted(found)


def _base(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def file_sizes(path: str) -> list[int] | None:
    """The sizes of the files the table's current version uses, from its log read with delta-rs (a JVM query would
    need Delta's internal DeltaLog API); None, with a warning, when delta-rs cannot read it (a store or a table
    feature it does not support)."""
    from deltalake import DeltaTable

    try:
        actions = DeltaTable(path, storage_options=storage.object_store_options(path) or None).get_add_actions()
        return [int(size) for size in actions.column("size_bytes").to_pylist()]
    except Exception as exc:  # noqa: BLE001  (compaction then falls back to the average size from DESCRIBE DETAIL)
        log.warning("maintain: file sizes of %s not read from its log (%s: %s); deciding compaction on the average "
                    "file size", path, type(exc).__name__, str(exc)[:300])
        return None


def vacuum_due(commits: list[tuple[int, float, str]], now: float, retention_s: float) -> bool:
    """Whether VACUUM could now delete a file it could not at its last run: some commit other than a VACUUM's own
    (`(version, epoch seconds, operation)`) left the retention window since then.  Files a commit stopped using
    become deletable once the commit is older than the window; the last VACUUM took every one older than its own
    window."""
    vacuums = [ts for _, ts, op in commits if op == "VACUUM END"]
    covered_until = max(vacuums) - retention_s if vacuums else float("-inf")
    return any(covered_until <= ts < now - retention_s for _, ts, op in commits if not op.startswith("VACUUM"))


def default_parallelism(spark) -> int:
    """The session's task slots: Spark's default parallelism (Spark Connect has no SparkContext to ask: its setting)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001  (Spark Connect)
        return int(spark.conf.get("spark.default.parallelism", "64"))


@dataclass
class TableMaintenance:
    """What maintenance did to one table."""
    table: str
    files: int = 0                 # files in use before
    bytes: int = 0
    small_files: int | None = 0    # files in use under maintain.small_file_mib (None: the log could not be read)
    compacted_files: int = 0       # files OPTIMIZE replaced ...
    compacted_into: int = 0        # ... with this many
    vacuumed_files: int | None = 0    # files VACUUM deleted (None: the table's log does not say)
    vacuumed_bytes: int | None = 0
    vacuum: str | None = None        # the VACUUM run: "full" or "lite" (None: none was due)
    seconds: float = 0.0
    error: str | None = None

    def line(self) -> str:
        if self.error:
            return f"{self.table}: failed: {self.error}"
        done = []
        if self.compacted_files:
            done.append(f"{self.compacted_files} files compacted into {self.compacted_into}")
        if self.vacuumed_files is None or self.vacuumed_files:
            done.append(f"vacuum ({self.vacuum}) deleted {_count(self.vacuumed_files)} files "
                        f"({_mib(self.vacuumed_bytes)})")
        return (f"{self.table}: {self.files} files ({_mib(self.bytes)}): "
                f"{'; '.join(done) or 'nothing to do'} ({self.seconds:.1f} s)")


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _mib(n: int | None) -> str:
    return "? MiB" if n is None else f"{n / _MIB:.1f} MiB"


class MaintainJob(SparkJob):
    name = "maintain"
    description = "every Delta table of the lake: compact small files (OPTIMIZE), delete unused old files (VACUUM)"

    def run_job(self, spark, args):
        cfg = self.cfg.maintain
        tables = lake_tables(self.paths.lake)
        if cfg.tables:
            unknown = sorted(set(cfg.tables) - {name for name, _ in tables})
            if unknown:
                raise ConfigError(f"maintain.tables names {unknown}, which are not Delta tables under "
                                 f"{self.paths.lake} (there: {[name for name, _ in tables]})")
            tables = [(name, path) for name, path in tables if name in cfg.tables]
        settings = {LIST_PARALLELISM: str(cfg.list_parallelism or default_parallelism(spark)), VACUUM_LOGGING: "true",
                    OPTIMIZE_MIN_FILE_SIZE: str(int(cfg.small_file_mib * _MIB))}
        if cfg.retention_hours < DELTA_DEFAULT_RETENTION_HOURS:
            log.warning("maintain: retention %s h is under Delta's %d h: a reader on a snapshot older than that, "
                        "and time travel past it, lose their files", cfg.retention_hours, DELTA_DEFAULT_RETENTION_HOURS)
            settings[RETENTION_CHECK] = "false"
        self.metrics.input_rows = len(tables)
        done: list[TableMaintenance] = []
        with session_conf(spark, settings):
            for name, path in tables:
                result = TableMaintenance(name)
                started = time.monotonic()
                try:
                    self.maintain(spark, path, result)
                except Exception as exc:  # noqa: BLE001  (one damaged table must not leave the others unmaintained)
                    result.error = f"{type(exc).__name__}: {exc}"[:1000]
                    self.metrics.skip("table_failed")
                    self.metrics.examples.append({"table": name, "error": result.error})
                result.seconds = round(time.monotonic() - started, 3)
                (log.error if result.error else log.info)("maintain: %s", result.line())
                done.append(result)
        ok = [r for r in done if not r.error]
        self.metrics.output_rows = len(ok)
        vacuumed = [r for r in ok if r.vacuumed_files]
        self.metrics.extra.update(
            retention_hours=cfg.retention_hours,
            tables={r.table: {k: v for k, v in vars(r).items() if k != "table"} for r in done},
            files_before=sum(r.files for r in ok),
            files_compacted=sum(r.compacted_files for r in ok), files_written=sum(r.compacted_into for r in ok),
            files_vacuumed=sum(r.vacuumed_files for r in vacuumed),
            bytes_vacuumed=sum(r.vacuumed_bytes or 0 for r in vacuumed))
        failed = [r for r in done if r.error]
        if failed:
            raise RuntimeError(f"maintenance failed for {len(failed)} of {len(done)} tables (the others are done): "
                               + "; ".join(r.line() for r in failed))

    def maintain(self, spark, location: str, result: TableMaintenance) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        cfg = self.cfg.maintain
        path = storage.spark_uri(location)
        table = DeltaTable.forPath(spark, path)
        detail = table.detail().select("numFiles", "sizeInBytes").first()
        result.files, result.bytes = int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0)
        small = cfg.small_file_mib * _MIB
        sizes = file_sizes(location) if result.files >= 2 else []
        if sizes is None:
            result.small_files = None
            due = result.files >= max(cfg.compact_min_files, 2) and result.bytes / result.files < small
        else:
            result.small_files = sum(size < small for size in sizes)
            due = result.small_files >= max(cfg.compact_min_files, 2)
        if due:
            metrics = table.optimize().executeCompaction().select("metrics.numFilesRemoved",
                                                                   "metrics.numFilesAdded").first()
            result.compacted_files, result.compacted_into = int(metrics[0]), int(metrics[1])
        commits = [(int(r[0]), float(r[1]), r[2]) for r in
                   table.history().select("version", F.col("timestamp").cast("double"), "operation").collect()]
        if not vacuum_due(commits, time.time(), cfg.retention_hours * 3600):
            return
        before = max(v for v, _, _ in commits)
        result.vacuum = cfg.vacuum
        retain = f"RETAIN {cfg.retention_hours:g} HOURS"
        try:
            spark.sql(f"VACUUM delta.`{path}` {'LITE ' if cfg.vacuum == 'lite' else ''}{retain}").collect()
        except Exception as exc:  # noqa: BLE001  (py4j and Spark's own error types; the condition names it)
            if cfg.vacuum != "lite" or LITE_REFUSED not in str(exc):
                raise
            said = next((line for line in str(exc).splitlines() if LITE_REFUSED in line), LITE_REFUSED)
            log.warning("maintain: %s: Delta refused VACUUM LITE (its log no longer reaches back to the last VACUUM: "
                        "%s); running a full VACUUM", location, said.strip()[:300])
            result.vacuum = "full"
            spark.sql(f"VACUUM delta.`{path}` {retain}").collect()
        start = (table.history().where(f"version > {before} AND operation = 'VACUUM START'")
                 .select("operationMetrics").first())
        metrics = (start[0] if start else None) or {}
        result.vacuumed_files = int(metrics["numFilesToDelete"]) if "numFilesToDelete" in metrics else None
        result.vacuumed_bytes = int(metrics["sizeOfDataToDelete"]) if "sizeOfDataToDelete" in metrics else None


if __name__ == "__main__":
    sys.exit(MaintainJob.main())
