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
A stage whose tables are absent is reported as "not run".  Tokens of text that was never tokenized are
estimated from the kept documents' measured characters per token, and marked as estimates.
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

log = logging.getLogger("weblm.jobs.report")

NOT_RUN = "not run"
NUMERIC_TYPES = ("IntegerType", "LongType", "ShortType", "FloatType", "DoubleType", "DecimalType")


def _delta(spark, location: str):
    from delta.tables import DeltaTable

    return spark.read.format("delta").load(location) if DeltaTable.isDeltaTable(spark, location) else None


def _aggregates(df, chars: str | None = None, text: str | None = None, html: str | None = None,
                tokens: str | None = None) -> list:
    from pyspark.sql import functions as F

    exprs = [F.count(F.lit(1)).alias("documents")]
    if chars:
        exprs.append(F.sum(chars).alias("chars"))
    if text:
        exprs.append(F.sum(F.octet_length(text)).alias("text_bytes"))
    if html:
        exprs.append(F.sum(F.length(html)).alias("html_bytes"))  # length() of a binary column counts bytes
    if tokens:
        exprs.append(F.sum(tokens).alias("tokens"))
    return exprs


def _measure(row, key: str | None = None) -> dict:
    """One measure: documents, and whichever of chars, text_bytes, html_bytes, tokens were summed."""
    data = row.asDict() if row is not None else {"documents": 0}
    out = {k: int(v or 0) for k, v in data.items() if k != key}
    if "tokens" in out:
        out["tokens_estimated"] = False
    return out


def measure(df, **columns) -> dict:
    return _measure(df.agg(*_aggregates(df, **columns)).first())


def measure_by(df, key: str, **columns) -> dict[str, dict]:
    rows = df.groupBy(key).agg(*_aggregates(df, **columns)).collect()
    return {str(r[key]): _measure(r, key) for r in sorted(rows, key=lambda r: -r["documents"])}


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
    """The lake's tables as the report reads them; an absent table is None."""

    def __init__(self, spark, cfg, paths) -> None:
        self.spark, self.cfg, self.paths = spark, cfg, paths
        self._cache: dict = {}

    def location(self, name: str) -> str:
        return storage.spark_uri(self.paths.table(name))

    def table(self, name: str):
        if name not in self._cache:
            self._cache[name] = _delta(self.spark, self.location(name))
        return self._cache[name]

    def ledger(self, job: str):
        return _delta(self.spark, storage.spark_uri(storage.join(self.paths.lake, "_ledger", job)))

    def metrics(self, job: str) -> dict:
        path = storage.join(self.paths.lake, self.cfg.metrics_dir, f"{job}.json")
        return json.loads(storage.read_text(path)) if storage.exists(path) else {}


# -- the stages ----------------------------------------------------------------------------------------
def ingest_stage(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    bronze = lake.table("bronze.pages")
    if bronze is None:
        return _not_run("ingest", "bronze.pages", "bronze.pages is absent: run python -m jobs.ingest")
    pages = measure(bronze, html="html")
    files = lake.table("bronze.warc_files")
    skipped = {}
    if files is not None:  # records ingest read but did not make pages of (request records, damaged records)
        skipped = {r["reason"]: int(r["n"]) for r in files.select(F.explode("skips").alias("reason", "n"))
                   .groupBy("reason").agg(F.sum("n").alias("n")).collect()}
    statuses = {str(r["status"]): int(r["count"]) for r in bronze.groupBy("status").count().collect()}
    return _stage("ingest", "bronze.pages", pages, pages, {}, records_skipped=skipped, http_statuses=statuses)


def extract_stage(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    bronze, documents, ledger = lake.table("bronze.pages"), lake.table("silver.documents"), lake.ledger("extract")
    if bronze is None or documents is None or ledger is None:
        return _not_run("extract", "bronze.pages -> silver.documents",
                        "bronze.pages, silver.documents or _ledger/extract is absent: run python -m jobs.extract")
    outcomes = (bronze.select("doc_id", "html").join(ledger.select("doc_id", "outcome"), "doc_id", "left")
                .withColumn("outcome", F.coalesce("outcome", F.lit("not_processed"))))
    by_outcome = measure_by(outcomes, "outcome", html="html")
    by_outcome.pop("kept", None)
    return _stage("extract", "bronze.pages -> silver.documents", measure(bronze, html="html"),
                  measure(documents, chars="n_chars", text="text"), by_outcome)


def quality_stage(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    from jobs.quality import filters

    cfg = lake.cfg.quality
    tables = f"{cfg.input_table} -> {cfg.tables.signals} -> {cfg.tables.output}"
    documents, signals, kept = lake.table(cfg.input_table), lake.table(cfg.tables.signals), lake.table(cfg.tables.output)
    if documents is None or signals is None or kept is None:
        return _not_run("quality", tables, f"{cfg.tables.signals} or {cfg.tables.output} is absent: "
                        "run python -m jobs.quality.job")
    try:
        view = filters.filtered(documents.select("doc_id", "content_sha256"), signals, cfg)
    except ValueError as exc:  # conf names a signal column this table lacks: say so instead of failing the report
        return _not_run("quality", tables, f"the filter view cannot be built: {exc}")
    decided = (documents.select("doc_id", "n_chars", "text")
               .join(view.select("doc_id", "drop_reason", F.lit(True).alias("scored")), "doc_id", "left")
               .withColumn("reason", F.when(F.col("scored").isNull(), F.lit("not_scored"))
                           .otherwise(F.col("drop_reason"))))
    reasons = measure_by(decided.where(F.col("reason").isNotNull()), "reason", chars="n_chars", text="text")
    pii_columns = [c for c in signals.columns if c.startswith("pii_")]
    pii, with_pii = {}, {}
    if pii_columns:  # one pass for both: the matches per type and the documents holding any
        row = signals.agg(*[F.sum(c).alias(f"n_{c}") for c in pii_columns],
                          *[F.count(F.when(F.col(c) > 0, 1)).alias(f"d_{c}") for c in pii_columns]).first()
        pii = {c.removeprefix("pii_"): int(row[f"n_{c}"] or 0) for c in pii_columns}
        with_pii = {c.removeprefix("pii_"): int(row[f"d_{c}"] or 0) for c in pii_columns}
    flagged = {}
    if cfg.mode == "flag":  # nothing leaves the table: the reasons are flags, not drops
        flagged, reasons = {k: v for k, v in reasons.items() if k != "not_scored"}, {
            k: v for k, v in reasons.items() if k == "not_scored"}
    return _stage("quality", tables, measure(documents, chars="n_chars", text="text"),
                  measure(kept, chars="n_chars", text="text"), reasons, filter_mode=cfg.mode, flagged=flagged,
                  pii_found=pii, documents_with_pii=with_pii)


def dedup_stage(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    cfg = lake.cfg.dedup
    tables = f"{cfg.input_table} -> {cfg.tables.documents} -> {cfg.tables.output}"
    source, decision, out = lake.table(cfg.input_table), lake.table(cfg.tables.documents), lake.table(cfg.tables.output)
    if source is None or decision is None or out is None:
        return _not_run("dedup", tables, f"{cfg.tables.documents} or {cfg.tables.output} is absent: "
                        "run python -m jobs.dedup.job")
    docs = source.select("doc_id", "n_chars", "text")
    decided = docs.join(decision.select("doc_id", "drop_reason"), "doc_id", "left")
    reasons = measure_by(decided.where(F.col("drop_reason").isNotNull()), "drop_reason", chars="n_chars", text="text")
    # kept by the decision, absent from the output: the paragraph pass left it too short, or contamination dropped it
    later = decided.where(F.col("drop_reason").isNull()).join(out.select("doc_id"), "doc_id", "left_anti")
    contaminated = lake.table(cfg.tables.contamination)
    if contaminated is not None:
        later = later.join(contaminated.select("doc_id", F.col("drop_reason").alias("why")), "doc_id", "left")
    else:
        later = later.withColumn("why", F.lit(None).cast("string"))
    later = later.withColumn("why", F.coalesce("why", F.lit("too_short_after_paragraphs")))
    reasons.update(measure_by(later, "why", chars="n_chars", text="text"))
    not_decided = decided.where(F.col("drop_reason").isNull()).join(decision.select("doc_id"), "doc_id", "left_anti")
    kept = measure(out, chars="n_chars", text="text")
    survivors_before = decided.where(F.col("drop_reason").isNull()).join(out.select("doc_id"), "doc_id", "left_semi")
    cut = max(0, (measure(survivors_before, chars="n_chars").get("chars", 0)) - kept.get("chars", 0))
    clusters = decision.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("size"))
    sizes = {int(r["size"]): int(r["count"]) for r in clusters.groupBy("size").count().collect()}
    return _stage("dedup", tables, measure(source, chars="n_chars", text="text"), kept, reasons,
                  not_decided=int(not_decided.count()), chars_cut_from_kept=cut,
                  cluster_sizes=dict(sorted(sizes.items())),
                  largest_clusters=[r.asDict() for r in clusters.orderBy(F.desc("size"), "cluster_id").limit(5).collect()])


def tokenize_stage(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    name = lake.cfg.tokenize.input_table
    source, gold = lake.table(name), lake.table("gold.tokens")
    if source is None or gold is None:
        return _not_run("tokenize", f"{name} -> gold.tokens", "gold.tokens is absent: run python -m jobs.tokens")
    docs = source.select("doc_id", "n_chars", "text")
    tokens = gold.select("doc_id", "n_tokens")
    kept = measure(docs.join(tokens, "doc_id"), chars="n_chars", text="text", tokens="n_tokens")
    missing = docs.join(tokens, "doc_id", "left_anti").withColumn("reason", F.lit("not_tokenized"))
    dropped = measure_by(missing, "reason", chars="n_chars", text="text")
    stale = int(tokens.join(docs, "doc_id", "left_anti").count())
    return _stage("tokenize", f"{name} -> gold.tokens", measure(docs, chars="n_chars", text="text"), kept, dropped,
                  gold_rows_not_in_input=stale)


def export_stage(lake: Lake) -> dict:
    from pyspark.sql import functions as F

    gold = lake.table("gold.tokens")
    manifest_path = storage.join(lake.paths.shards_dir, "manifest.json")
    tables = "gold.tokens -> shards + manifest.json"
    if gold is None or not storage.exists(manifest_path):
        return _not_run("export", tables, f"{manifest_path} is absent: run python -m jobs.export")
    manifest = json.loads(storage.read_text(manifest_path))
    lineage = lake.table(lake.cfg.export.lineage_table)
    tokens = gold.select("doc_id", "n_tokens")
    input_ = measure(tokens, tokens="n_tokens")
    if lineage is not None:
        exported = tokens.join(lineage.select("doc_id").distinct(), "doc_id", "left_semi")
        left_out = (tokens.join(lineage.select("doc_id").distinct(), "doc_id", "left_anti")
                    .withColumn("reason", F.lit("not_in_mix")))
        kept, dropped = measure(exported, tokens="n_tokens"), measure_by(left_out, "reason", tokens="n_tokens")
    else:
        kept, dropped = dict(input_), {}
    totals = manifest.get("totals", {})
    return _stage("export", tables, input_, kept, dropped, manifest=manifest_path,
                  shards=len(manifest.get("shards", [])), sequences=int(totals.get("documents", 0)),
                  shard_tokens=int(totals.get("tokens", 0)), mix=manifest.get("mix", {}).get("name"),
                  realized_mix=realized_mix(manifest.get("mix", {})))


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


def final_text(lake: Lake, stages: dict) -> tuple[str | None, object]:
    """The last text table a stage that ran wrote: what the run keeps for training."""
    outputs = {"extract": "silver.documents", "quality": lake.cfg.quality.tables.output,
               "dedup": lake.cfg.dedup.tables.output}
    for name in ("dedup", "quality", "extract"):
        if stages[name]["status"] == "ok":
            return outputs[name], lake.table(outputs[name])
    return None, None


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


def retention(lake: Lake, final) -> dict:
    """Per language and per host (top N from conf): extracted documents/characters against what is kept."""
    from pyspark.sql import functions as F

    documents = lake.table("silver.documents")
    if documents is None or final is None:
        return {"languages": [], "hosts": []}
    signals = lake.table(lake.cfg.quality.tables.signals)
    language = (signals.select("doc_id", "language") if signals is not None
                else documents.select("doc_id", "language"))
    extracted = documents.select("doc_id", "host", "n_chars").join(language, "doc_id", "left").fillna(
        {"language": "und"})
    kept = final.select("doc_id", F.col("n_chars").alias("kept_chars"), F.lit(1).alias("kept"))
    joined = extracted.join(kept, "doc_id", "left")

    def table(key: str, top: int, pages=None) -> list[dict]:
        rows = joined.groupBy(key).agg(F.count(F.lit(1)).alias("documents"), F.sum("n_chars").alias("chars"),
                                       F.sum(F.coalesce("kept", F.lit(0))).alias("documents_kept"),
                                       F.sum(F.coalesce("kept_chars", F.lit(0))).alias("chars_kept"))
        if pages is not None:
            rows = pages.join(rows, key, "left").fillna(0)
        order = "pages" if pages is not None else "chars"
        out = [{k: (v if isinstance(v, str) else int(v or 0)) for k, v in r.asDict().items()}
               for r in rows.orderBy(F.desc(order), key).collect()]
        head, rest = out[:top], out[top:]
        if rest:
            head.append({key: f"other ({len(rest)})", **{k: sum(r[k] for r in rest) for k in rest[0] if k != key}})
        for r in head:
            r["chars_kept_share"] = r["chars_kept"] / r["chars"] if r["chars"] else None
        return head

    bronze = lake.table("bronze.pages")
    pages = bronze.groupBy("host").agg(F.count(F.lit(1)).alias("pages")) if bronze is not None else None
    return {"languages": table("language", lake.cfg.report.top_languages),
            "hosts": table("host", lake.cfg.report.top_hosts, pages)}


def histograms(lake: Lake) -> dict:
    """A histogram of every numeric column of silver.signals over a seeded sample, with its filter thresholds."""
    import numpy as np

    from jobs.quality import filters

    cfg = lake.cfg.quality
    signals = lake.table(cfg.tables.signals)
    if signals is None:
        return {}
    columns = [f.name for f in signals.schema.fields if type(f.dataType).__name__ in NUMERIC_TYPES]
    rows = signals.count()
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


def collect(spark, cfg, paths) -> dict:
    """Every number of the report, as one JSON-able dict (the notebook and the command share it)."""
    lake = Lake(spark, cfg, paths)
    stages = {}
    for name, reader in STAGE_READERS:
        stages[name] = reader(lake)
        log.info("report: %s %s", name, stages[name]["status"])
    ratio = chars_per_token(stages)
    estimate_tokens(stages, ratio)
    final_name, final = final_text(lake, stages)
    return {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "lake": paths.lake,
            "chars_per_token": ratio, "stages": list(stages.values()), "overall": overall(lake, stages, final_name),
            "retention": retention(lake, final), "signal_histograms": histograms(lake)}


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
    ReportJob().run()
