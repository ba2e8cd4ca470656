"""WARC files -> `bronze.pages` (SEAMS §2 -> §3), idempotent: MERGE on doc_id, insert-only.

    python -m jobs.ingest [--lake DIR] [-p warc_dir=DIR] [FILE_OR_DIR ...]
    spark-submit jobs/ingest.py ...

One or a few complete WARC files per task (`ingest.files_per_task`); each record becomes a page
or a counted skip (`jobs.warc.records`).  A broken record or file is logged with file, offset
and what went wrong; the good records before it are kept.
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/<stage>.py` puts jobs/ first on sys.path, where jobs/tokenize.py would shadow
    # the standard library's `tokenize` (imported by linecache, hence by logging and tracebacks)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import glob
import logging
import math
from functools import partial

from jobs.base import SparkJob, merge_table
from jobs.warc.records import BRONZE_COLUMNS, SKIP_COLUMNS, read_warcs

log = logging.getLogger("weblm.jobs.ingest")


def bronze_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("doc_id", T.StringType()),
        T.StructField("url", T.StringType()),
        T.StructField("host", T.StringType()),
        T.StructField("fetch_time", T.TimestampType()),
        T.StructField("status", T.IntegerType()),
        T.StructField("content_type", T.StringType()),
        T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
        T.StructField("html", T.BinaryType()),
        T.StructField("charset", T.StringType()),
        T.StructField("payload_digest", T.StringType()),
        T.StructField("warc_file", T.StringType()),
        T.StructField("warc_offset", T.LongType()),
        T.StructField("warc_record_id", T.StringType()),
    ])


def list_warc_files(inputs: list[str], patterns: list[str]) -> list[str]:
    """Complete WARC files under the given folders (or the files themselves), sorted.

    The spider's open files end in `.open` and match none of the patterns, so they are never read.
    """
    found: set[str] = set()
    for item in inputs:
        item = os.path.abspath(item)  # a command-line argument: relative to where the user runs it
        if os.path.isdir(item):
            for pattern in patterns:
                found.update(p for p in glob.glob(os.path.join(item, "**", pattern), recursive=True)
                             if os.path.isfile(p))
        elif os.path.isfile(item):
            found.add(item)
        else:
            raise FileNotFoundError(f"WARC input {item} does not exist; check paths.warc_dir or the arguments")
    return sorted(found)


def _rows(paths, **kwargs):
    columns = BRONZE_COLUMNS + SKIP_COLUMNS
    for row in read_warcs(paths, **kwargs):
        yield tuple(row[c] for c in columns)


class IngestJob(SparkJob):
    name = "ingest"
    description = "WARC files -> bronze.pages (Delta, MERGE on doc_id)"

    def add_arguments(self, parser):
        parser.add_argument("inputs", nargs="*", help="WARC files or folders (default: paths.warc_dir)")

    def run_job(self, spark, args):
        from pyspark import StorageLevel
        from pyspark.sql import Window, functions as F, types as T

        cfg = self.cfg.ingest
        files = list_warc_files(args.inputs or [self.paths.warc_dir], cfg.patterns)
        self.metrics.extra["warc_files"] = len(files)
        log.info("ingest: %d WARC files, %d per task", len(files), cfg.files_per_task)
        schema = bronze_schema()
        for name in SKIP_COLUMNS:
            schema = schema.add(name, T.StringType())
        read = partial(_rows, record_types=cfg.record_types, max_payload_bytes=cfg.max_payload_bytes)
        slices = max(1, math.ceil(len(files) / max(1, cfg.files_per_task)))
        records = (spark.createDataFrame(spark.sparkContext.parallelize(files, slices).mapPartitions(read), schema)
                   .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            self.metrics.input_rows = records.count()
            self.record_skips(records, "skip_reason", ["warc_file", "warc_offset", "skip_detail"],
                              routine=["other_record_type"])
            pages = records.where(F.col("skip_reason").isNull()).select(*BRONZE_COLUMNS)
            # the same WARC-Record-ID twice (a file copied under two names): keep the first copy
            first = Window.partitionBy("doc_id").orderBy("warc_file", "warc_offset")
            ranked = pages.withColumn("_copy", F.row_number().over(first))
            duplicates = ranked.where("_copy > 1").count()
            if duplicates:
                self.metrics.skip("duplicate_record_id", duplicates)
            unique = ranked.where("_copy = 1").drop("_copy")
            result = merge_table(spark, unique, self.table("bronze.pages"), "doc_id", sync=False)
        finally:
            records.unpersist()
        self.metrics.output_rows = result["inserted"]
        self.metrics.extra.update(table="bronze.pages", table_version=result["version"],
                                  pages_read=self.metrics.input_rows - sum(self.metrics.skipped.values()),
                                  rows_inserted=result["inserted"])


if __name__ == "__main__":
    IngestJob().run()
