"""The per-stage report: documents, tokens and bytes kept and dropped per stage and reason (read-only).

    python -m jobs.report [--lake DIR] [--out FILE.html] [-o report.top_hosts=50]
    spark-submit jobs/report.py ...

Reads the lake as the stages left it and writes one self-contained HTML page (funnel, drop reasons, retention
per language and host, a histogram of every numeric column of silver.signals with the thresholds of
`quality.filters` drawn on it) and a JSON file beside it with the same numbers.  Per stage:
  ingest    bronze.pages: fetched pages and their HTML bytes (record-level skips from bronze.warc_files)
  extract   bronze.pages x `_ledger/extract` outcomes: kept (silver.documents) or the skip reason
  quality   silver.documents x the filter view's drop_reason over silver.signals (PII counts per type)
  dedup     silver.quality x dedup.documents keep/drop_reason, then paragraphs/contamination into silver.deduped
  tokenize  the tokenize input table x gold.tokens (measured tokens)
  export    gold.tokens x the manifest and gold.shard_lineage (shards, tokens, realized mix per source)
The tables are read once, into one row per document with what each table says of it, and every count is
answered by one query over those rows (jobs/report_tally.py).  A stage whose tables are absent is reported as
"not run".  Tokens of text that was never tokenized are estimated from the kept documents' measured characters
per token, and marked as estimates.
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/report.py` puts jobs/ first on sys.path; keep module names unambiguous
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import json  # noqa: E402
import logging  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import storage  # noqa: E402
from jobs.base import SparkJob  # noqa: E402
from jobs.report_tally import Fates, Tally  # noqa: E402
from jobs.warc.records import TRUNCATED  # noqa: E402

log = logging.getLogger("weblm.jobs.report")

NOT_RUN = "not run"
NUMERIC_TYPES = ("IntegerType", "LongType", "ShortType", "FloatType", "DoubleType", "DecimalType")


def _total(measures: dict[str, dict]) -> dict:
    total: dict = {}
    for m in measures.values():
        for k, v in m.items():
            if k != "tokens_estimated":
                total[k] = total.get(k, 0) + v
    return total or {"documents": 0}


def _stage(name: str, tables: str, input_: dict, kept: dict, dropped: dict[str, dict], **extra) -> dict:
    return {"stage": name, "status": "ok", "tables": tables, "input": input_, "kept": kept,
            "dropped": dropped, "dropped_total": _total(dropped), **extra}


def _not_run(name: str, tables: str, why: str) -> dict:
    return {"stage": name, "status": NOT_RUN, "tables": tables, "why": why}


class Lake:
    """The lake's tables as the report reads them, each loaded once; an absent table is None."""

    def __init__(self, spark, cfg, paths) -> None:
        self.spark, self.cfg, self.paths = spark, cfg, paths
        self._cache: dict = {}
        self.view_error: str | None = None    # why quality's filter view cannot be built, if it cannot

    def table(self, name: str):
        return self._load(self.paths.table(name))

    def ledger(self, job: str):
        return self._load(storage.join(self.paths.lake, "_ledger", job))

    def _load(self, path: str):
        if path not in self._cache:
            # a listing instead of DeltaTable.isDeltaTable: that reads the whole log, and load() reads it again
            found = storage.exists(storage.join(path, "_delta_log"))
            self._cache[path] = self.spark.read.format("delta").load(storage.spark_uri(path)) if found else None
        return self._cache[path]

    def metrics(self, job: str) -> dict:
        path = storage.join(self.paths.lake, self.cfg.metrics_dir, f"{job}.json")
        return json.loads(storage.read_text(path)) if storage.exists(path) else {}


def document_fates(lake: Lake, only=None) -> Fates:
    """Every table a stage reads or writes, as fields of one row per document (built by `Fates.build`); with `only`
    (a frame of doc_ids: jobs/fate.py), of those documents alone."""
    from pyspark.sql import functions as F

    from jobs.quality import filters

    cfg, fates = lake.cfg, Fates()

    def those(df):
        return df if df is None or only is None else df.join(F.broadcast(only), "doc_id", "left_semi")

    def table(name: str):
        return those(lake.table(name))

    bronze = table("bronze.pages")
    if bronze is not None:
        fates.add("bronze.pages", bronze, html_bytes=F.length("html"), host=F.col("host"), status=F.col("status"),
                  truncated=F.col("headers").getItem(TRUNCATED))
    ledger = those(lake.ledger("extract"))
    if ledger is not None:
        fates.add("_ledger/extract", ledger, outcome=F.col("outcome"))
    for name in ("silver.documents", cfg.quality.input_table, cfg.quality.tables.output, cfg.dedup.input_table,
                 cfg.dedup.tables.output, cfg.tokenize.input_table):
        df = table(name)
        if df is not None:
            fates.add(name, df, chars=F.col("n_chars"), text_bytes=F.octet_length("text"))
    documents, signals = table("silver.documents"), table(cfg.quality.tables.signals)
    if documents is not None:
        fates.add("silver.documents", documents, host=F.col("host"), language=F.col("language"))
    if signals is not None:
        fates.add(cfg.quality.tables.signals, signals, language=F.col("language"),
                  **{c: F.col(c) for c in signals.columns if c.startswith("pii_")})
        quality_input = table(cfg.quality.input_table)
        if quality_input is not None:
            try:
                view = filters.filtered(quality_input.select("doc_id", "content_sha256",
                                                             *filters.flag_columns(quality_input)), signals, cfg.quality)
                fates.add("quality_view", view, reason=F.col("drop_reason"))
            except ValueError as exc:   # conf names a signal column this table lacks: the quality stage says so
                lake.view_error = str(exc)
    for name in (cfg.dedup.tables.documents, cfg.dedup.tables.contamination):
        df = table(name)
        if df is not None:
            fates.add(name, df, reason=F.col("drop_reason"))
    gold, lineage = table("gold.tokens"), table(cfg.export.lineage_table)
    if gold is not None:
        fates.add("gold.tokens", gold, tokens=F.col("n_tokens"))
    if lineage is not None:
        fates.add(cfg.export.lineage_table, lineage)
    fates.build()
    return fates


def _text(fates: Fates, name: str) -> dict:
    """The measure columns of a text table's characters and bytes."""
    return {"chars": fates.col(name, "chars"), "text_bytes": fates.col(name, "text_bytes")}


# -- the stages: each asks its questions of the tally and returns how to build its entry once answered, or its
# -- "not run" entry -----------------------------------------------------------------------------------------
def ingest_stage(lake: Lake, fates: Fates, tally: Tally):
    from pyspark.sql import functions as F

    if not fates.has("bronze.pages"):
        return _not_run("ingest", "bronze.pages", "bronze.pages is absent: run python -m jobs.ingest")
    bronze = fates.present("bronze.pages")
    pages = tally.ask(bronze, html_bytes=fates.col("bronze.pages", "html_bytes"))
    statuses = tally.ask(bronze, key=fates.col("bronze.pages", "status"))
    cut = fates.col("bronze.pages", "truncated")   # WARC-Truncated: kept, but the crawler did not get the whole body
    truncated = tally.ask(bronze & F.col(cut).isNotNull(), key=cut)
    files = lake.table("bronze.warc_files")
    # records ingest read but did not make pages of (request records, damaged records)
    skipped = (tally.measure(files.select(F.explode("skips").alias("reason", "n")), key="reason", weight="n")
               if files is not None else None)
    # URLs the crawl recorded as not fetched (bronze.unfetched): each URL once, by the reason of its latest record,
    # unless a capture of it came after that (a network failure, then a fetch that worked)
    unfetched, not_fetched = lake.table("bronze.unfetched"), None
    if unfetched is not None:
        from pyspark.sql import Window

        order = Window.partitionBy("url").orderBy(F.col("time").desc_nulls_last(), F.col("doc_id"))
        latest = unfetched.withColumn("_n", F.row_number().over(order)).where("_n = 1").select("url", "time", "reason")
        since = (latest.alias("u").join(lake.table("bronze.pages").select("url", "fetch_time").alias("p"), "url")
                 .where(F.col("p.fetch_time") >= F.col("u.time")).select("url").distinct())
        not_fetched = tally.measure(latest.join(since, "url", "left_anti"), key="reason")
    return lambda: _stage("ingest", "bronze.pages", tally.one(pages), tally.one(pages), {},
                          records_skipped=tally.counts(skipped) if skipped else {}, http_statuses=tally.counts(statuses),
                          pages_truncated=tally.counts(truncated),
                          urls_not_fetched=tally.counts(not_fetched) if not_fetched is not None else {})


def extract_stage(lake: Lake, fates: Fates, tally: Tally):
    from pyspark.sql import functions as F

    if not all(fates.has(t) for t in ("bronze.pages", "silver.documents", "_ledger/extract")):
        return _not_run("extract", "bronze.pages -> silver.documents",
                        "bronze.pages, silver.documents or _ledger/extract is absent: run python -m jobs.extract")
    bronze, html = fates.present("bronze.pages"), fates.col("bronze.pages", "html_bytes")
    outcome = F.coalesce(F.col(fates.col("_ledger/extract", "outcome")), F.lit("not_processed"))
    by_outcome = tally.ask(bronze & (outcome != "kept"), key=outcome, html_bytes=html)
    pages = tally.ask(bronze, html_bytes=html)
    kept = tally.ask(fates.present("silver.documents"), **_text(fates, "silver.documents"))
    return lambda: _stage("extract", "bronze.pages -> silver.documents", tally.one(pages), tally.one(kept),
                          tally.many(by_outcome))


def quality_stage(lake: Lake, fates: Fates, tally: Tally):
    from pyspark.sql import functions as F

    cfg = lake.cfg.quality
    tables = f"{cfg.input_table} -> {cfg.tables.signals} -> {cfg.tables.output}"
    if not all(fates.has(t) for t in (cfg.input_table, cfg.tables.signals, cfg.tables.output)):
        return _not_run("quality", tables, f"{cfg.tables.signals} or {cfg.tables.output} is absent: "
                        "run python -m jobs.quality.job")
    if lake.view_error:
        return _not_run("quality", tables, f"the filter view cannot be built: {lake.view_error}")
    documents, text = fates.present(cfg.input_table), _text(fates, cfg.input_table)
    # not scored: the document's current text has no signals (the view joins on the text's hash too)
    reason = F.when(~fates.present("quality_view"), F.lit("not_scored")).otherwise(
        F.col(fates.col("quality_view", "reason")))
    reasons = tally.ask(documents & reason.isNotNull(), key=reason, **text)
    signals = fates.present(cfg.tables.signals)
    types = [c.removeprefix("pii_") for c in lake.table(cfg.tables.signals).columns if c.startswith("pii_")]
    pii = {t: (tally.ask(signals, weight=fates.col(cfg.tables.signals, f"pii_{t}")),
               tally.ask(signals & (F.col(fates.col(cfg.tables.signals, f"pii_{t}")) > 0))) for t in types}
    stage_input = tally.ask(documents, **text)
    stage_kept = tally.ask(fates.present(cfg.tables.output), **_text(fates, cfg.tables.output))

    def finish() -> dict:
        dropped, flagged = tally.many(reasons), {}
        if cfg.mode == "flag":  # nothing leaves the table: the reasons are flags, not drops
            flagged = {k: v for k, v in dropped.items() if k != "not_scored"}
            dropped = {k: v for k, v in dropped.items() if k == "not_scored"}
        return _stage("quality", tables, tally.one(stage_input), tally.one(stage_kept), dropped, filter_mode=cfg.mode,
                      flagged=flagged, pii_found={t: tally.one(q)["documents"] for t, (q, _) in pii.items()},
                      documents_with_pii={t: tally.one(q)["documents"] for t, (_, q) in pii.items()})
    return finish


def dedup_stage(lake: Lake, fates: Fates, tally: Tally):
    from pyspark.sql import functions as F

    cfg = lake.cfg.dedup
    tables = f"{cfg.input_table} -> {cfg.tables.documents} -> {cfg.tables.output}"
    if not all(fates.has(t) for t in (cfg.input_table, cfg.tables.documents, cfg.tables.output)):
        return _not_run("dedup", tables, f"{cfg.tables.documents} or {cfg.tables.output} is absent: "
                        "run python -m jobs.dedup.job")
    source, text = fates.present(cfg.input_table), _text(fates, cfg.input_table)
    decision = F.col(fates.col(cfg.tables.documents, "reason"))
    reasons = tally.ask(source & decision.isNotNull(), key=decision, **text)
    # kept by the decision (or never decided), absent from the output: the paragraph pass left it too short, or
    # contamination dropped it
    survivor, in_out = source & decision.isNull(), fates.present(cfg.tables.output)
    why = (F.col(fates.col(cfg.tables.contamination, "reason")) if fates.has(cfg.tables.contamination)
           else F.lit(None).cast("string"))
    later = tally.ask(survivor & ~in_out, key=F.coalesce(why, F.lit("too_short_after_paragraphs")), **text)
    not_decided = tally.ask(survivor & ~fates.present(cfg.tables.documents))
    kept = tally.ask(in_out, **_text(fates, cfg.tables.output))
    stage_input = tally.ask(source, **text)
    survivors_before = tally.ask(survivor & in_out, chars=text["chars"])
    clusters = lake.table(cfg.tables.documents).groupBy("cluster_id").agg(F.count(F.lit(1)).alias("size"))
    sizes = tally.measure(clusters, key="size")

    def finish() -> dict:
        dropped = tally.many(reasons)
        dropped.update(tally.many(later))
        largest = [r.asDict() for r in clusters.orderBy(F.desc("size"), "cluster_id").limit(5).collect()]
        return _stage("dedup", tables, tally.one(stage_input), tally.one(kept), dropped,
                      not_decided=tally.one(not_decided)["documents"],
                      chars_cut_from_kept=max(0, tally.one(survivors_before)["chars"] - tally.one(kept)["chars"]),
                      cluster_sizes=dict(sorted((int(k), v) for k, v in tally.counts(sizes).items())),
                      largest_clusters=largest)
    return finish


def tokenize_stage(lake: Lake, fates: Fates, tally: Tally):
    from pyspark.sql import functions as F

    name = lake.cfg.tokenize.input_table
    if not (fates.has(name) and fates.has("gold.tokens")):
        return _not_run("tokenize", f"{name} -> gold.tokens", "gold.tokens is absent: run python -m jobs.tokens")
    source, gold, text = fates.present(name), fates.present("gold.tokens"), _text(fates, name)
    kept = tally.ask(source & gold, **text, tokens=fates.col("gold.tokens", "tokens"))
    dropped = tally.ask(source & ~gold, key=F.lit("not_tokenized"), **text)
    stale = tally.ask(gold & ~source)
    stage_input = tally.ask(source, **text)
    return lambda: _stage("tokenize", f"{name} -> gold.tokens", tally.one(stage_input), tally.one(kept),
                          tally.many(dropped), gold_rows_not_in_input=tally.one(stale)["documents"])


def export_stage(lake: Lake, fates: Fates, tally: Tally):
    from pyspark.sql import functions as F

    manifest_path = storage.join(lake.paths.shards_dir, "manifest.json")
    tables = "gold.tokens -> shards + manifest.json"
    if not fates.has("gold.tokens") or not storage.exists(manifest_path):
        return _not_run("export", tables, f"{manifest_path} is absent: run python -m jobs.export")
    manifest = json.loads(storage.read_text(manifest_path))
    gold, tokens = fates.present("gold.tokens"), fates.col("gold.tokens", "tokens")
    stage_input = tally.ask(gold, tokens=tokens)
    kept = left_out = None
    lineage = lake.cfg.export.lineage_table
    if fates.has(lineage):
        kept = tally.ask(gold & fates.present(lineage), tokens=tokens)
        left_out = tally.ask(gold & ~fates.present(lineage), key=F.lit("not_in_mix"), tokens=tokens)
    totals = manifest.get("totals", {})

    def finish() -> dict:
        input_ = tally.one(stage_input)
        return _stage("export", tables, input_, tally.one(kept) if kept else dict(input_),
                      tally.many(left_out) if left_out else {}, manifest=manifest_path,
                      shards=len(manifest.get("shards", [])), sequences=int(totals.get("documents", 0)),
                      shard_tokens=int(totals.get("tokens", 0)), mix=manifest.get("mix", {}).get("name"),
                      realized_mix=realized_mix(manifest.get("mix", {})))
    return finish


def realized_mix(mix: dict) -> dict:
    """source -> realized row; a staged mix's rows are keyed `<stage>/<source>`, in stage order."""
    if "realized" in mix:
        return mix["realized"]
    return {f"{stage['stage']}/{source}": row for stage in mix.get("stages", [])
            for source, row in stage["realized"].items()}


STAGE_READERS = (("ingest", ingest_stage), ("extract", extract_stage), ("quality", quality_stage),
                 ("dedup", dedup_stage), ("tokenize", tokenize_stage), ("export", export_stage))
TEXT_OUTPUTS = {"extract": "silver.documents"}  # plus quality's and dedup's configured outputs


# -- across stages ----------------------------------------------------------------------------------
def chars_per_token(stages: dict) -> float | None:
    kept = stages["tokenize"].get("kept", {}) if stages["tokenize"]["status"] == "ok" else {}
    return kept["chars"] / kept["tokens"] if kept.get("tokens") else None


def estimate_tokens(stages: dict, ratio: float | None) -> None:
    """Every measure with characters but no measured tokens gets `tokens` = chars / ratio, marked estimated."""
    if not ratio:
        return
    for stage in stages.values():
        groups = [stage.get("input"), stage.get("kept"), stage.get("dropped_total"),
                  *stage.get("dropped", {}).values(), *stage.get("flagged", {}).values()]
        for m in groups:
            if m and "chars" in m and "tokens" not in m:
                m["tokens"], m["tokens_estimated"] = round(m["chars"] / ratio), True


def final_text(lake: Lake, ran: dict[str, bool]) -> str | None:
    """The last text table a stage that ran wrote: what the run keeps for training."""
    outputs = {"extract": "silver.documents", "quality": lake.cfg.quality.tables.output,
               "dedup": lake.cfg.dedup.tables.output}
    return next((outputs[name] for name in ("dedup", "quality", "extract") if ran[name]), None)


def overall(lake: Lake, stages: dict, final_name: str | None) -> dict:
    target = list(lake.cfg.report.target_kept_share)
    out = {"final_table": final_name, "target_kept_share": target}
    if final_name is None:
        return out
    pages = stages["ingest"].get("kept", {}).get("documents", 0)
    extracted = stages["extract"]["kept"]
    final_stage = next(s for s in ("dedup", "quality", "extract") if stages[s]["status"] == "ok")
    kept = stages[final_stage]["kept"]
    share = kept.get("chars", 0) / extracted["chars"] if extracted.get("chars") else None
    out.update(pages=pages, documents_kept=kept["documents"], extracted_chars=extracted.get("chars", 0),
               kept_chars=kept.get("chars", 0), kept_text_share=share,
               kept_document_share=kept["documents"] / pages if pages else None,
               html_bytes=stages["ingest"]["kept"].get("html_bytes", 0), kept_text_bytes=kept.get("text_bytes", 0),
               verdict=None if share is None else ("below target" if share < target[0] else
                                                   "above target" if share > target[1] else "within target"))
    return out


def retention(lake: Lake, fates: Fates, final: str | None, tally: Tally):
    """Per language and per host (top N from conf): extracted documents/characters against what is kept."""
    from pyspark.sql import functions as F

    if not fates.has("silver.documents") or final is None:
        return lambda: {"languages": [], "hosts": []}
    signals = lake.cfg.quality.tables.signals
    language = fates.col(signals, "language") if fates.has(signals) else fates.col("silver.documents", "language")
    keys = {"language": F.coalesce(F.col(language), F.lit("und")), "host": F.col(fates.col("silver.documents", "host"))}
    extracted, kept = fates.present("silver.documents"), fates.present(final)
    questions = {name: (tally.ask(extracted, key=key, chars=fates.col("silver.documents", "chars")),
                        tally.ask(extracted & kept, key=key, chars=fates.col(final, "chars")))
                 for name, key in keys.items()}
    pages = (tally.ask(fates.present("bronze.pages"), key=fates.col("bronze.pages", "host"))
             if fates.has("bronze.pages") else None)

    def table(key: str, top: int, pages: dict | None = None) -> list[dict]:
        every, kept = (tally.many(q) for q in questions[key])
        rows = [{key: k, **({"pages": pages[k]} if pages is not None else {}),
                 "documents": every.get(k, {}).get("documents", 0), "chars": every.get(k, {}).get("chars", 0),
                 "documents_kept": kept.get(k, {}).get("documents", 0), "chars_kept": kept.get(k, {}).get("chars", 0)}
                for k in (pages if pages is not None else every)]
        order = "pages" if pages is not None else "chars"
        rows.sort(key=lambda r: (-r[order], r[key]))
        head, rest = rows[:top], rows[top:]
        if rest:
            head.append({key: f"other ({len(rest)})", **{k: sum(r[k] for r in rest) for k in rest[0] if k != key}})
        for r in head:
            r["chars_kept_share"] = r["chars_kept"] / r["chars"] if r["chars"] else None
        return head

    return lambda: {"languages": table("language", lake.cfg.report.top_languages),
                    "hosts": table("host", lake.cfg.report.top_hosts, tally.counts(pages) if pages else None)}


def histograms(lake: Lake, fates: Fates, tally: Tally):
    """A histogram of every numeric column of silver.signals over a seeded sample, with its filter thresholds."""
    name = lake.cfg.quality.tables.signals
    if not fates.has(name):
        return lambda: {}
    rows = tally.ask(fates.present(name))
    return lambda: signal_histograms(lake, lake.table(name), tally.one(rows)["documents"])


def signal_histograms(lake: Lake, signals, rows: int) -> dict:
    import numpy as np

    from jobs.quality import filters

    cfg = lake.cfg.quality
    columns = [f.name for f in signals.schema.fields if type(f.dataType).__name__ in NUMERIC_TYPES]
    cap = lake.cfg.report.histogram_max_rows
    sample = signals.sample(False, min(1.0, cap / rows), seed=0) if rows > cap else signals
    data = sample.select(*columns).toPandas()
    out = {}
    for column in columns:
        values = data[column].astype("float64").to_numpy()
        finite = values[np.isfinite(values)]
        thresholds = [{"reason": r.reason, "min": r.min, "max": r.max} for r in cfg.filters if r.column == column]
        if column == "language_score":  # the routing's floor for languages without their own entry
            thresholds.append({"reason": "language_uncertain", "max": None,
                               "min": filters.route(cfg.routing.default).min_language_score})
        if not len(finite):
            counts, edges = [], []
        else:
            low, high = float(finite.min()), float(finite.max())
            counts, edges = np.histogram(finite, bins=lake.cfg.report.histogram_bins,
                                         range=(low, high if high > low else low + 1.0))
        out[column] = {"rows": int(len(values)), "missing": int(len(values) - len(finite)),
                       "counts": [int(c) for c in counts], "edges": [float(e) for e in edges],
                       "thresholds": thresholds}
    return {"rows": rows, "sampled_rows": int(len(data)), "columns": out}


def tdm_reservations(lake: Lake) -> list[dict]:
    """Per origin whose latest TDMRep file (bronze.site_files) reserves text and data mining anywhere: the locations
    it reserves, the licence policies it names (`tdm-policy`) and how many of its documents in silver.documents the
    file flags (opt_out = tdmrep.json), most first: whom to ask for a licence, and what one would bring back."""
    from pyspark.sql import functions as F

    import tdmrep
    from jobs.extract import latest_tdm_files, url_origin

    files = lake.table("bronze.site_files")
    if files is None:
        return []
    reserving = {}
    for row in latest_tdm_files(files).where(F.col("tdm_rules").isNotNull()).collect():   # a few rows per host
        rules = tdmrep.reservations(row["tdm_rules"])
        if rules:
            reserving[row["origin"]] = rules
    documents = lake.table("silver.documents")
    flagged = {}
    if reserving and documents is not None and "opt_out" in documents.columns:
        flagged = dict(documents.where(F.col("opt_out") == tdmrep.RESERVED).groupBy(url_origin()).count().collect())
    rows = [{"origin": origin, "documents": flagged.get(origin, 0), "locations": [loc for loc, _ in rules],
             "policies": sorted({policy for _, policy in rules if policy})} for origin, rules in reserving.items()]
    return sorted(rows, key=lambda r: (-r["documents"], r["origin"]))


def collect(spark, cfg, paths) -> dict:
    """Every number of the report, as one JSON-able dict (the notebook and the command share it)."""
    lake = Lake(spark, cfg, paths)
    fates = document_fates(lake)
    tally = Tally(fates)
    try:
        pending = {name: reader(lake, fates, tally) for name, reader in STAGE_READERS}   # a builder, or "not run"
        final_name = final_text(lake, {name: callable(p) for name, p in pending.items()})
        kept_per_key, signal_histograms_of = retention(lake, fates, final_name, tally), histograms(lake, fates, tally)
        tally.run()
        stages = {name: p() if callable(p) else p for name, p in pending.items()}
    finally:
        fates.release()
    for name, stage in stages.items():
        log.info("report: %s %s", name, stage["status"])
    ratio = chars_per_token(stages)
    estimate_tokens(stages, ratio)
    return {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "lake": paths.lake,
            "chars_per_token": ratio, "stages": list(stages.values()), "overall": overall(lake, stages, final_name),
            "retention": kept_per_key(), "signal_histograms": signal_histograms_of(),
            "tdm_reservations": tdm_reservations(lake)}


def write(report: dict, out_html: str) -> tuple[str, str]:
    """The HTML page and the JSON beside it (`report.html` -> `report.json`)."""
    from jobs.report_html import render

    out_json = (out_html[:-5] if out_html.endswith(".html") else out_html) + ".json"
    storage.write_text(out_json, json.dumps(report, indent=2, default=str) + "\n")
    storage.write_text(out_html, render(report))
    return out_html, out_json


class ReportJob(SparkJob):
    name = "report"
    description = "the per-stage report: kept and dropped per stage and reason, retention, signal histograms (HTML + JSON)"
    writes_lake = False   # it reads the tables and writes its page under _report/: a report while a run goes is fine

    def add_arguments(self, parser):
        parser.add_argument("--out", help="the HTML file (default: report.out, else <lake>/_report/report.html); "
                            "the JSON goes beside it")

    def run_job(self, spark, args):
        report = collect(spark, self.cfg, self.paths)
        out = args.out or self.cfg.report.out or storage.join(self.paths.lake, "_report", "report.html")
        html_path, json_path = write(report, out)
        ran = [s for s in report["stages"] if s["status"] == "ok"]
        self.metrics.input_rows = len(report["stages"])
        self.metrics.output_rows = len(ran)
        self.metrics.extra.update(html=html_path, json=json_path,
                                  not_run=[s["stage"] for s in report["stages"] if s["status"] != "ok"])
        share = report["overall"].get("kept_text_share")
        print(f"[report] {len(ran)}/{len(report['stages'])} stages ran; kept text share "
              f"{'n/a' if share is None else f'{share:.1%}'}; {html_path} (+ {json_path})", flush=True)


if __name__ == "__main__":
    sys.exit(ReportJob.main())
