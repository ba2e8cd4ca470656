"""`silver.documents` -> `silver.signals` -> (view) -> `silver.quality`: score once, decide later.

    python -m jobs.quality.job [--lake DIR] [--full] [-o quality.routing.default.min_language_score=0.5]
    spark-submit jobs/quality/job.py ...

1. Signals (`silver.signals`, keyed on doc_id): language ID (lid.176), Gopher quality and repetition, C4,
   FineWeb, bad input (empty, binary, mojibake), PII counts per type, and every model scorer enabled in
   `quality.scorers` (jobs/quality/scorers.py), over Arrow batches on the executors.  Only documents whose
   text (content_sha256) or signal settings changed since they were scored are scored again, and of those only
   the stale groups: enabling, re-configuring or retraining one scorer computes that scorer's columns alone.
2. Filters: a view (`quality.view`, built by `jobs.quality.filters.filtered`) over documents and signals with
   the thresholds of `quality.filters` and per-language routing; `drop_reason` is the first failing rule.
   Changing a threshold re-decides from stored signals: no signal is recomputed.
3. `silver.quality`: the kept documents with PII replaced by typed placeholders, their language,
   language_score and quality_score (what dedup's survivor rule prefers).  With `quality.c4_line_removal.enabled`,
   C4's line rules first cut lines out of the text of documents routed to the c4 group (`c4_lines_removed`,
   `c4_chars_removed` per document; a document left with no line is dropped as `c4_no_lines_left`).  The edit
   and redaction run only on documents not already in the table with the same source text and edit settings.
Every drop is counted by reason in `<lake>/_metrics/quality.json`; nothing fails the job for bad input.
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/quality/job.py` puts jobs/quality/ first on sys.path; keep module names unambiguous
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (_here, os.path.dirname(_here))]

import logging  # noqa: E402
from dataclasses import asdict  # noqa: E402

from jobs.base import SparkJob, is_empty, merge_table, settings_sha256, table_version, upsert_table  # noqa: E402
from jobs.quality import filters, heuristics, signals  # noqa: E402

log = logging.getLogger("weblm.jobs.quality")

DOCUMENT_COLUMNS = ("doc_id", "url", "host", "fetch_time", "title", "text", "warc_file", "warc_offset",
                    "content_sha256")
OUTPUT_COLUMNS = ("doc_id", "url", "host", "fetch_time", "title", "text", "language", "language_score",
                  "quality_score", "n_chars", "warc_file", "warc_offset", "content_sha256", "source_sha256",
                  "drop_reason", "c4_lines_removed", "c4_chars_removed", "edit_sha256")
EDITED_SCHEMA = "doc_id string, text string, c4_lines_removed int, c4_chars_removed int"
NO_EDIT = "none"             # edit_sha256 of a text the line removal did not touch (off, or not routed to c4)


def _delta(spark, path: str):
    from delta.tables import DeltaTable

    return spark.read.format("delta").load(path) if DeltaTable.isDeltaTable(spark, path) else None


def signal_params(cfg) -> heuristics.SignalParams:
    return heuristics.SignalParams(**asdict(cfg.signals))


def line_removal(cfg) -> heuristics.LineRemoval:
    return heuristics.LineRemoval(**asdict(cfg.c4_line_removal))


def edit_batches(batches, rules: heuristics.LineRemoval):
    """`mapInArrow` body: (doc_id, text, edit_sha256) in; C4's line removal where edit_sha256 is not NO_EDIT, then
    PII redaction; out (doc_id, text, c4_lines_removed, c4_chars_removed)."""
    import pyarrow as pa

    for batch in batches:
        texts, lines, chars = [], [], []
        for text, edit in zip(batch.column("text").to_pylist(), batch.column("edit_sha256").to_pylist()):
            removed = (text or "", 0, 0) if edit == NO_EDIT else heuristics.c4_remove_lines(text, rules)
            texts.append(signals.pii.redact(removed[0])[0])
            lines.append(removed[1])
            chars.append(removed[2])
        yield pa.RecordBatch.from_arrays([batch.column("doc_id"), pa.array(texts, pa.string()),
                                          pa.array(lines, pa.int32()), pa.array(chars, pa.int32())],
                                         names=["doc_id", "text", "c4_lines_removed", "c4_chars_removed"])


def filtered_view(spark, cfg, table):
    """The filter view over the lake's current documents and signals (`table(name)` gives a table's location)."""
    documents = spark.read.format("delta").load(table(cfg.input_table))
    documents = documents.select(*DOCUMENT_COLUMNS, *filters.flag_columns(documents))
    stored = spark.read.format("delta").load(table(cfg.tables.signals))
    view = filters.filtered(documents, stored, cfg)
    view.createOrReplaceTempView(cfg.view)
    return view


class QualityJob(SparkJob):
    name = "quality"
    description = "silver.documents -> silver.signals (language, heuristics, PII, scorers) -> silver.quality"

    def run_job(self, spark, args):
        cfg = self.cfg.quality
        batch_key = "spark.sql.execution.arrow.maxRecordsPerBatch"
        previous_batch = spark.conf.get(batch_key, None)
        spark.conf.set(batch_key, str(cfg.batch_rows))
        try:
            self.update_signals(spark, args.full)
        finally:
            if previous_batch is None:
                spark.conf.unset(batch_key)
            else:
                spark.conf.set(batch_key, previous_batch)
        self.decide(spark, args.full)

    # -- score once -----------------------------------------------------------------------------------------
    def update_signals(self, spark, full: bool) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.quality
        params, scorer_settings = signal_params(cfg), dict(cfg.scorers or {})
        columns = signals.table_columns(scorer_settings)   # imports every enabled scorer: a bad name fails here
        filters.check_settings(cfg, list(columns))   # a bad rule fails now, not after the scoring
        gaps = filters.routing_gaps(cfg)
        if any(gaps.values()):
            log.warning("quality: filter rules whose group no language routes to (they apply to no document): %s; "
                        "groups quality.routing names that no rule has: %s",
                        gaps["rules_routed_to_no_language"] or "none", gaps["routed_groups_without_rules"] or "none")
            self.metrics.extra.update(gaps)
        paths = self.paths
        # load every enabled scorer here first: a missing model stops the job at once with the command that
        # trains it, instead of failing each Spark task with the message buried in a worker traceback
        signals.LoadedScorers(scorer_settings, paths).score([], [])
        base_sha = settings_sha256(signals.signals_settings(params))
        scorer_shas = {name: settings_sha256(deps)
                       for name, deps in signals.scorer_dependencies(scorer_settings, paths).items()}
        path = self.table(cfg.tables.signals)
        docs = spark.read.format("delta").load(self.table(cfg.input_table)).select("doc_id", "text", "content_sha256")
        existing = _delta(spark, path)
        stored_columns = [c for c in columns if existing is not None and c in existing.columns]
        if full or existing is None:
            rows = docs
        else:   # a row's stored values ride along when its text is unchanged; the worker recomputes what is stale
            rows = docs.join(existing.select(*stored_columns), ["doc_id", "content_sha256"], "left")
        rows = rows.select(*[F.col(c) if c in rows.columns else F.lit(None).cast(t).alias(c)
                             for c, t in {"text": "string", **columns}.items()])
        stale = {name: F.col(signals.state_column(name)).isNull() | (F.col(signals.state_column(name)) != sha)
                 for name, sha in scorer_shas.items()}
        base_stale = F.col("signals_sha256").isNull() | (F.col("signals_sha256") != base_sha)
        any_stale = base_stale
        for condition in stale.values():
            any_stale = any_stale | condition
        todo = rows.where(any_stale)
        schema_changed = existing is not None and set(existing.columns) != set(columns)
        gone = (None if existing is None
                else existing.select("doc_id").join(docs.select("doc_id"), "doc_id", "left_anti"))
        self.metrics.extra.update(signals_table=cfg.tables.signals, signals_sha256=base_sha, scorer_sha256=scorer_shas,
                                  mode="full" if full else "incremental", scorers=sorted(scorer_shas))
        counts = todo.agg(F.count(F.lit(1)), F.sum(base_stale.cast("int")),
                          *[F.sum((base_stale | condition).cast("int")) for condition in stale.values()]).first()
        self.metrics.extra.update(signals_computed=int(counts[1] or 0),
                                  scorers_computed={name: int(n or 0) for name, n in zip(stale, counts[2:])})
        if not counts[0] and not schema_changed and (gone is None or is_empty(gone)):
            log.info("quality: every document's signals are current; silver.signals unchanged")
            self.metrics.extra["signals_version"] = table_version(spark, path)
            return
        scored = (todo.mapInArrow(lambda b: signals.arrow_batches(b, params, scorer_settings, paths, base_sha,
                                                                  scorer_shas), signals.table_schema(scorer_settings))
                  .persist(StorageLevel.MEMORY_AND_DISK))   # scored once: the write below reads it more than once
        try:
            scored.count()
            result = self.write_signals(spark, scored, path, existing, docs, full, schema_changed, gone)
        finally:
            scored.unpersist()
        self.metrics.extra.update(signals_version=result["version"], signals_inserted=result["inserted"],
                                  signals_updated=result["updated"], signals_deleted=result["deleted"])
        log.info("quality: base signals computed for %d documents; scorers: %s", self.metrics.extra["signals_computed"],
                 self.metrics.extra["scorers_computed"] or "none enabled")

    @staticmethod
    def write_signals(spark, scored, path: str, existing, docs, full: bool, schema_changed: bool, gone):
        """Commit the rescored rows: a merge when the columns are the same, else one overwrite with today's columns
        (a scorer enabled or disabled: rows needing no new value are carried over, not scored again)."""
        from pyspark.sql import functions as F

        if existing is None or (full and not schema_changed):
            return merge_table(spark, scored, path, "doc_id", sync=True)
        if not schema_changed:
            return upsert_table(spark, scored, path, "doc_id", delete_keys=gone)
        names = scored.columns
        carried = (existing.join(docs.select("doc_id", "content_sha256"), ["doc_id", "content_sha256"], "left_semi")
                   .join(scored.select("doc_id"), "doc_id", "left_anti"))
        carried = carried.select(*[F.col(c) if c in carried.columns else F.lit(None).cast(t).alias(c)
                                   for c, t in zip(names, [f.dataType for f in scored.schema.fields])])
        table = scored if full else scored.unionByName(carried)
        table.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
        return {"version": table_version(spark, path), "inserted": 0, "updated": 0, "deleted": 0}

    # -- decide later ---------------------------------------------------------------------------------------
    def decide(self, spark, full: bool) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.quality
        view = filtered_view(spark, cfg, self.table).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            self.metrics.input_rows = view.count()
            if cfg.mode == "flag":  # nothing leaves silver.quality: reasons are counted as flags, not skips
                self.metrics.extra["flagged"] = {r[0]: r[1] for r in view.where(F.col("drop_reason").isNotNull())
                                                 .groupBy("drop_reason").count().collect()}
            else:
                self.record_skips(view, "drop_reason", ["doc_id", "url", "language"])
            kept = view if cfg.mode == "flag" else view.where(F.col("drop_reason").isNull())
            rules = line_removal(cfg)
            edit = settings_sha256(asdict(rules))[:16]
            edited_here = F.lit(rules.enabled) & filters.applies(filters.C4_LINES_GROUP, cfg)
            kept = (kept.withColumnRenamed("content_sha256", "source_sha256")
                    .withColumn("edit_sha256", F.when(edited_here, F.lit(edit)).otherwise(F.lit(NO_EDIT))))
            self.metrics.extra["languages"] = {r[0]: {"documents": r[1], "kept": r[2]} for r in view.groupBy("language").agg(
                F.count(F.lit(1)), F.sum(F.when(F.col("drop_reason").isNull(), 1).otherwise(0))).collect()}
            path = self.table(cfg.tables.output)
            stored = _delta(spark, path)
            # a table written by an older version of this job is rebuilt whole with today's columns
            stale_schema = stored is not None and set(stored.columns) != set(OUTPUT_COLUMNS)
            existing = None if full or stale_schema else stored
            key = ["doc_id", "source_sha256", "edit_sha256"]
            if existing is None:
                todo, reused = kept.select("doc_id", "text", "edit_sha256"), None
            else:  # the edit and PII redaction run once per source text and edit settings: such rows are reused
                have = existing.select(*key, "text", "c4_lines_removed", "c4_chars_removed")
                todo = kept.join(have.select(*key), key, "left_anti").select("doc_id", "text", "edit_sha256")
                reused = kept.select(*key).join(have, key).select("doc_id", "text", "c4_lines_removed",
                                                                  "c4_chars_removed")
            edited = todo.mapInArrow(lambda b: edit_batches(b, rules), EDITED_SCHEMA).persist(
                StorageLevel.MEMORY_AND_DISK)
            self.metrics.extra["redacted"] = edited.count()
            texts = edited if reused is None else edited.unionByName(reused)
            out = (kept.drop("text").join(texts, "doc_id")
                   .withColumn("n_chars", F.length("text").cast("int"))
                   .withColumn("content_sha256", F.sha2(F.col("text"), 256)))
            if rules.enabled:
                totals = out.agg(F.sum((F.col("c4_lines_removed") > 0).cast("int")), F.sum("c4_lines_removed"),
                                 F.sum("c4_chars_removed")).first()
                self.metrics.extra["c4_line_removal"] = {"documents_edited": int(totals[0] or 0),
                                                         "lines_removed": int(totals[1] or 0),
                                                         "chars_removed": int(totals[2] or 0)}
                # C4 keeps no document without a line: a drop with its reason (flag mode: recorded, kept)
                emptied = (F.col("n_chars") == 0) & F.col("drop_reason").isNull()
                out = out.withColumn("drop_reason", F.when(emptied, F.lit("c4_no_lines_left"))
                                     .otherwise(F.col("drop_reason")))
                if cfg.mode != "flag":
                    self.record_skips(out.where(F.col("drop_reason") == "c4_no_lines_left"), "drop_reason",
                                      ["doc_id", "url", "language"])
                    out = out.where(F.col("drop_reason").isNull())
            out = out.select(*OUTPUT_COLUMNS)
            if stale_schema:   # merge cannot add columns: the table is replaced in one commit
                out.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
                result = {"version": table_version(spark, path), "inserted": 0, "updated": 0, "deleted": 0}
            else:
                result = merge_table(spark, out, path, "doc_id", sync=True)
            edited.unpersist()
        finally:
            view.unpersist()
        table = spark.read.format("delta").load(path)
        pii_totals = spark.read.format("delta").load(self.table(cfg.tables.signals)).agg(
            *[F.sum(c).alias(c) for c in signals.pii.COLUMNS]).first().asDict()
        self.metrics.output_rows = table.count()
        self.metrics.extra.update(
            table=cfg.tables.output, view=cfg.view, filter_mode=cfg.mode, table_version=result["version"],
            rows_inserted=result["inserted"], rows_updated=result["updated"], rows_deleted=result["deleted"],
            pii_found={k: int(v or 0) for k, v in pii_totals.items()})


if __name__ == "__main__":
    sys.exit(QualityJob.main())
