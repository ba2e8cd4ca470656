"""`bronze.pages` -> `silver.documents` (SEAMS §3): decode, extract main text, filter.

    python -m jobs.extract [--lake DIR] [-o extract.min_chars=100]
    spark-submit jobs/extract.py ...

Per document: status and content type, size cap (huge pages skipped), charset decoding
(header -> meta -> detected -> fallback with counted replacements), binary and too-deep pages skipped,
rs-trafilatura main text with trafilatura as its fallback, and the title (in a
killable child process with a per-document timeout: `jobs.text.sandbox`), minimum length.  Every
drop has a reason in the job's counters.  Idempotent: silver is synced to what this run derives
from bronze (MERGE on doc_id: changed rows updated, new inserted, gone deleted).  A host's TDMRep file
(bronze.site_files) sets `opt_out` on its pages; when a later crawl brings a changed file, the pages already in silver
are re-flagged without being extracted again (`reflag_tdm`).
"""
import logging
import sys
from dataclasses import asdict
from typing import Iterator

import storage
from jobs.base import (SparkJob, add_missing_columns, is_empty, merge_table, settings_sha256, table_version,
                       upsert_table)
from jobs.config import ExtractSettings
from jobs.text.main_text import Extracted
from jobs.text.opt_out import opt_out
from jobs.text.sandbox import DEFAULT_EXTRACTOR, page_extractor
from tdmrep import RESERVED, reserved
from jobs.warc.records import TRUNCATED

log = logging.getLogger("weblm.jobs.extract")

# settings that change how extraction runs, not what it outputs: changing them reprocesses nothing
OPERATIONAL_SETTINGS = {"sandbox", "timeout_s", "start_timeout_s", "tasks_per_core"}
SILVER_COLUMNS = ("doc_id", "url", "host", "fetch_time", "title", "text", "language", "n_chars",
                  "warc_file", "warc_offset", "opt_out", "warc_truncated", "content_sha256")
_INPUT = ("doc_id", "url", "host", "fetch_time", "status", "content_type", "charset", "headers", "html",
          "warc_file", "warc_offset")


def output_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("doc_id", T.StringType()),
        T.StructField("url", T.StringType()),
        T.StructField("host", T.StringType()),
        T.StructField("fetch_time", T.TimestampType()),
        T.StructField("title", T.StringType()),
        T.StructField("text", T.StringType()),
        T.StructField("language", T.StringType()),
        T.StructField("n_chars", T.IntegerType()),
        T.StructField("warc_file", T.StringType()),
        T.StructField("warc_offset", T.LongType()),
        # flags from what the crawl archived, for quality's rules (jobs.quality.filters.DOCUMENT_FLAGS): the
        # publisher's text-and-data-mining opt-out, and the crawler's WARC-Truncated reason; null = none
        T.StructField("opt_out", T.StringType()),
        T.StructField("warc_truncated", T.StringType()),
        # bookkeeping, not written to silver
        T.StructField("skip_reason", T.StringType()),
        T.StructField("decode_source", T.StringType()),
        T.StructField("replacements", T.IntegerType()),
    ])


def extract_batches(batches: Iterator, cfg: ExtractSettings, extractor: str = DEFAULT_EXTRACTOR) -> Iterator:
    """`mapInPandas` body: one output row per bronze row (a document or a skip).

    With `extract.sandbox`, one child process per partition runs `extractor` (an import path) under
    `extract.timeout_s`; without it, `extractor` runs in this process.
    """
    with page_extractor(cfg, extractor) as extract:
        yield from _extract_batches(batches, cfg, extract)


def _extract_batches(batches: Iterator, cfg: ExtractSettings, extract) -> Iterator:
    import pandas as pd

    agents = tuple(cfg.opt_out_agents)
    for batch in batches:
        out = {name: [] for name in output_schema().names}
        for row in batch.itertuples(index=False):
            result = extract(row.html, None if pd.isna(row.status) else int(row.status),
                             row.content_type, row.charset, row.url)
            ok = isinstance(result, Extracted)
            headers = dict(row.headers) if row.headers is not None else {}   # Arrow's map: (key, value) pairs
            flag = opt_out(headers, row.html, agents) if ok else None
            if ok and flag is None and reserved(getattr(row, "tdm_rules", None), row.url):
                flag = RESERVED   # the host's /.well-known/tdmrep.json reserves this path
            out["opt_out"].append(flag)
            out["warc_truncated"].append(headers.get(TRUNCATED))
            out["doc_id"].append(row.doc_id)
            out["url"].append(row.url)
            out["host"].append(row.host)
            out["fetch_time"].append(row.fetch_time)
            out["title"].append(result.title if ok else None)
            out["text"].append(result.text if ok else None)
            out["language"].append(cfg.language)
            out["n_chars"].append(len(result.text) if ok else None)
            out["warc_file"].append(row.warc_file)
            out["warc_offset"].append(row.warc_offset)
            out["skip_reason"].append(None if ok else result)
            out["decode_source"].append(result.decode_source if ok else None)
            out["replacements"].append(result.replacements if ok else None)
        frame = pd.DataFrame(out)
        frame["n_chars"] = frame["n_chars"].astype("Int32")
        frame["replacements"] = frame["replacements"].astype("Int32")
        yield frame


def url_origin():
    """The URL column's origin (scheme://host[:port], lowercased): what a TDMRep file speaks for."""
    from pyspark.sql import functions as F

    return F.lower(F.regexp_extract("url", r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#]+)", 1))


def latest_tdm_files(site_files):
    """Per origin, its latest definite `/.well-known/tdmrep.json` answer in `site_files` (bronze.site_files, which
    ingest keeps): `origin`, `file_id` (the answer's doc_id) and `tdm_rules` (its body when it was a 200, else null:
    a 4xx says the host declares nothing; a 5xx leaves the answer before it standing)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest = Window.partitionBy("origin").orderBy(F.col("fetch_time").desc(), F.col("doc_id"))
    definite = (F.col("status") == 200) | F.col("status").between(400, 499)
    return (site_files.where(definite)   # ingest keeps only the /.well-known/tdmrep.json answers there
            .select(url_origin().alias("origin"), "fetch_time", "doc_id", "status", "html")
            .withColumn("n", F.row_number().over(latest)).where(F.col("n") == 1)
            .select("origin", F.col("doc_id").alias("file_id"),
                    F.when(F.col("status") == 200, F.col("html")).alias("tdm_rules")))


def with_tdm_rules(todo, files):
    """`todo` with `tdm_rules`, its origin's file from `files` (latest_tdm_files; None: no bronze.site_files), read
    per page by tdmrep.reserved.  A join, not a broadcast: at web scale the hosts with such a file are many.  The
    file arrives with the crawl's first fetches of its host, so it is in bronze by the time the host's pages are
    extracted; a file that changes later is applied to the pages already in silver by `reflag_tdm`."""
    from pyspark.sql import functions as F

    if files is None:
        return todo.withColumn("tdm_rules", F.lit(None).cast("binary"))
    return todo.withColumn("origin", url_origin()).join(files.drop("file_id"), "origin", "left").drop("origin")


def tdm_flag_batches(batches: Iterator) -> Iterator:
    """`mapInPandas` body: (doc_id, url, opt_out, tdm_rules) in; (doc_id, opt_out, flag) out, `flag` RESERVED where
    the origin's file (`tdm_rules`) reserves the page's URL, else None."""
    import pandas as pd

    for frame in batches:
        flags = [RESERVED if reserved(r, u) else None for r, u in zip(frame["tdm_rules"], frame["url"])]
        yield pd.DataFrame({"doc_id": frame["doc_id"], "opt_out": frame["opt_out"],
                            "flag": pd.Series(flags, index=frame.index, dtype=object)})


def spread(spark, todo, scan, tasks_per_core: int):
    """`todo` (pages of `scan`, the bronze table read) hashed on doc_id into as many tasks as `scan` has splits, and at
    least `tasks_per_core` per core of the cluster.  Extraction costs ~50 ms of CPU a page, and bronze's files are as
    large as ingest made them: WCXB dev's 1,497 pages (416 MB) in one file ran as one task on one of 2 cores, 109 s
    against 90 s in one bare process; spread, 67 s against 88 s (bench/silver_pass.py).  Always one shuffle of the
    pages (~1 ms a page against ~50 ms of extraction): hashed, so a retried task gets the same pages without the
    sort a round-robin repartition needs; an explicit count, which adaptive execution does not coalesce; counted
    on the plain scan, because asking the joined plan of an incremental run for its partitions runs its shuffles."""
    wanted = max(scan.rdd.getNumPartitions(), spark.sparkContext.defaultParallelism * max(1, tasks_per_core))
    return todo.repartition(wanted, "doc_id")


class ExtractJob(SparkJob):
    name = "extract"
    description = "bronze.pages -> silver.documents (rs-trafilatura / trafilatura main text)"

    def run_job(self, spark, args):
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.extract
        settings = settings_sha256({k: v for k, v in asdict(cfg).items() if k not in OPERATIONAL_SETTINGS})
        bronze = spark.read.format("delta").load(self.table("bronze.pages")).select(*_INPUT)
        todo = self.pending_inputs(spark, bronze, "doc_id", settings, args.full)
        self.metrics.extra.update(table="silver.documents", mode="full" if args.full else "incremental",
                                  settings_sha256=settings)
        site_files = self.table("bronze.site_files")
        files = (latest_tdm_files(spark.read.format("delta").load(site_files))
                 if table_version(spark, site_files) is not None else None)
        if is_empty(todo):
            log.info("extract: nothing new in bronze.pages since the last run")
            self.metrics.extra["table_version"] = self.reflag_tdm(spark, files, todo.select("doc_id"))
            return
        todo = with_tdm_rules(todo, files)
        rows = (spread(spark, todo, bronze, cfg.tasks_per_core).mapInPandas(lambda batches: extract_batches(batches, cfg),
                                                                     output_schema())
                .withColumn("content_sha256", F.sha2(F.col("text"), 256))
                .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            self.metrics.input_rows = rows.count()
            self.record_skips(rows, "skip_reason", ["url", "warc_file", "warc_offset"],
                              routine=["bad_status", "not_html"])
            kept = rows.where(F.col("skip_reason").isNull())
            decoding = {r[0]: r[1] for r in kept.groupBy("decode_source").count().collect()}
            replaced = kept.agg(F.sum("replacements"), F.sum(F.when(F.col("replacements") > 0, 1))).first()
            silver = self.table("silver.documents")
            add_missing_columns(spark, silver, kept.select(*SILVER_COLUMNS))   # a table written before the flags
            if args.full:  # the table becomes exactly what this run extracted
                result = merge_table(spark, kept.select(*SILVER_COLUMNS), silver, "doc_id", sync=True)
            else:  # new documents in; documents re-extracted under new settings updated, or removed if now skipped
                result = upsert_table(spark, kept.select(*SILVER_COLUMNS), silver, "doc_id",
                                      delete_keys=rows.where(F.col("skip_reason").isNotNull()).select("doc_id"))
            self.record_processed(spark, rows.select(
                "doc_id", F.lit(settings).alias("settings_sha256"),
                F.coalesce("skip_reason", F.lit("kept")).alias("outcome")), "doc_id")
            version = self.reflag_tdm(spark, files, None if args.full else rows.select("doc_id"))
        finally:
            rows.unpersist()
        self.metrics.output_rows = self.metrics.input_rows - sum(self.metrics.skipped.values())
        self.metrics.extra.update(
            table_version=version or result["version"], decoded_by=decoding,
            replacement_chars=int(replaced[0] or 0), docs_with_replacements=int(replaced[1] or 0),
            huge_pages="skipped (reason too_large), not truncated",
            rows_inserted=result["inserted"], rows_updated=result["updated"], rows_deleted=result["deleted"])

    def reflag_tdm(self, spark, files, extracted) -> int | None:
        """Host files that changed since the last run (a new latest answer per origin, against the ledger
        `<lake>/_ledger/extract_tdmrep`) applied to the origin's documents already in silver: `opt_out` becomes
        RESERVED or null where the file now says so (a page's own flag, from its headers or meta, stands), so quality
        drops or takes back those pages without their being extracted again.  `extracted`: the doc_ids this run
        extracted with the files as they are (None: a full run, which extracted every page so).  Returns the
        silver table's new version, or None when no row changed."""
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        if files is None:
            return None
        ledger = storage.spark_uri(storage.join(self.paths.lake, "_ledger", "extract_tdmrep"))
        known = DeltaTable.isDeltaTable(spark, ledger)
        changed = files.join(spark.read.format("delta").load(ledger), ["origin", "file_id"], "left_anti") \
            if known else files
        version, count = None, 0
        silver = self.table("silver.documents")
        stored = spark.read.format("delta").load(silver) if table_version(spark, silver) is not None else None
        # a table extracted before the flags gets its opt_out column from the next run with new pages
        if extracted is not None and stored is not None and "opt_out" in stored.columns and not is_empty(changed):
            docs = (stored.select("doc_id", "url", "opt_out")
                    .where(F.col("opt_out").isNull() | (F.col("opt_out") == RESERVED))
                    .withColumn("origin", url_origin()).join(changed.drop("file_id"), "origin")
                    .join(extracted, "doc_id", "left_anti").select("doc_id", "url", "opt_out", "tdm_rules"))
            updates = (docs.mapInPandas(tdm_flag_batches, "doc_id string, opt_out string, flag string")
                       .where(~F.col("flag").eqNullSafe(F.col("opt_out"))).select("doc_id", "flag")
                       .persist())
            try:
                count = updates.count()
                if count:
                    (DeltaTable.forPath(spark, silver).alias("t").merge(updates.alias("s"), "t.doc_id = s.doc_id")
                     .whenMatchedUpdate(set={"opt_out": "s.flag"}).execute())
                    version = table_version(spark, silver)
                    log.info("extract: %d document(s) already in silver re-flagged by their host's changed "
                             "tdmrep.json", count)
            finally:
                updates.unpersist()
        self.metrics.extra["tdmrep_reflagged"] = count
        # after silver: a run killed in between applies the same files again (idempotent)
        merge_table(spark, files.select("origin", "file_id"), ledger, "origin", sync=True)
        return version


if __name__ == "__main__":
    sys.exit(ExtractJob.main())
