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
answered by one query over those rows (jobs/report_tally.py).  What each stage decided of a document (kept, dropped
or flagged, and why) is one set of expressions over those rows (`stage_ways`), which `python -m jobs.fate` reads
per document.  A stage whose tables are absent is reported as "not run".  Tokens of text that was never tokenized
are estimated from the kept documents' measured characters per token, and marked as estimates.
"""
import os
import sys

if __name__ == "__main__":
    # `spark-submit jobs/report.py` puts jobs/ first on sys.path; keep module names unambiguous
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import json  # noqa: E402
import logging  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from typing import Any  # noqa: E402

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
    (a frame of doc_ids: jobs/fate.py), of those documents alone, and without their sizes in bytes: those are the
    report's, and would read every page's HTML and every text of the lake to find a few documents' ways (the
    tables' files hold doc_ids in no order, so no file can be skipped)."""
    from pyspark.sql import functions as F

    from jobs.quality import filters

    cfg, fates, sizes = lake.cfg, Fates(), only is None

    def those(df):
        return df if df is None or only is None else df.join(F.broadcast(only), "doc_id", "left_semi")

    def table(name: str):
        return those(lake.table(name))

    bronze = table("bronze.pages")
    if bronze is not None:
        fates.add("bronze.pages", bronze, **({"html_bytes": F.length("html")} if sizes else {}), host=F.col("host"),
                  status=F.col("status"), truncated=F.col("headers").getItem(TRUNCATED))
    ledger = those(lake.ledger("extract"))
    if ledger is not None:
        fates.add("_ledger/extract", ledger, outcome=F.col("outcome"))
    for name in ("silver.documents", cfg.quality.input_table, cfg.quality.tables.output, cfg.dedup.input_table,
                 cfg.dedup.tables.output, cfg.tokenize.input_table):
        df = table(name)
        if df is not None:
            fates.add(name, df, chars=F.col("n_chars"), **({"text_bytes": F.octet_length("text")} if sizes else {}))
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


KEPT, DROPPED, FLAGGED = "kept", "dropped", "flagged"


@dataclass(frozen=True)
class Way:
    """One stage's decision on each document, as expressions over the rows of `Fates`: the report counts them and
    `python -m jobs.fate` reads them per document, so the two cannot disagree.  `why` is set when the stage has not
    run (a table it needs is absent), and then there are no expressions."""
    stage: str
    tables: str
    source: str                 # the `Fates` name of the table the stage reads: the documents it decides on
    why: str | None = None
    outcome: Any = None         # Column: kept | dropped | flagged, for the documents of `source`
    reason: Any = None          # Column: why dropped or flagged; null when kept
    measures: dict = field(default_factory=dict)   # name -> Column: what a kept document's row says of it


def stage_ways(lake: Lake, fates: Fates) -> dict[str, Way]:
    """extract .. export, each stage's decision rules (ingest decides nothing per document)."""
    from pyspark.sql import functions as F

    cfg, ways = lake.cfg, {}

    def absent(stage: str, tables: str, source: str, needs: tuple, why: str) -> bool:
        if all(fates.has(t) for t in needs):
            return False
        ways[stage] = Way(stage, tables, source, why=why)
        return True

    def col(name: str, field_: str):
        return F.col(fates.col(name, field_)) if fates.has(name) else F.lit(None)

    tables = "bronze.pages -> silver.documents"
    if not absent("extract", tables, "bronze.pages", ("bronze.pages", "silver.documents", "_ledger/extract"),
                  "bronze.pages, silver.documents or _ledger/extract is absent: run python -m jobs.extract"):
        kept, outcome = fates.present("silver.documents"), col("_ledger/extract", "outcome")
        ways["extract"] = Way("extract", tables, "bronze.pages", outcome=F.when(kept, KEPT).otherwise(DROPPED),
                              reason=F.when(~kept, F.coalesce(F.when(outcome != KEPT, outcome),
                                                              F.lit("not_processed"))),
                              measures={"chars": col("silver.documents", "chars")})
    q = cfg.quality
    tables = f"{q.input_table} -> {q.tables.signals} -> {q.tables.output}"
    if not absent("quality", tables, q.input_table, (q.input_table, q.tables.signals, q.tables.output),
                  f"{q.tables.signals} or {q.tables.output} is absent: run python -m jobs.quality.job"):
        if lake.view_error:
            ways["quality"] = Way("quality", tables, q.input_table,
                                  why=f"the filter view cannot be built: {lake.view_error}")
        else:
            # not scored: the document's current text has no signals (the view joins on the text's hash too)
            reason = F.when(~fates.present("quality_view"), F.lit("not_scored")).otherwise(col("quality_view",
                                                                                              "reason"))
            flag = F.lit(q.mode == "flag") & (reason != "not_scored")   # in flag mode a reason is not a drop
            ways["quality"] = Way("quality", tables, q.input_table, reason=reason,
                                  outcome=F.when(reason.isNull(), KEPT).when(flag, FLAGGED).otherwise(DROPPED),
                                  measures={"chars": col(q.tables.output, "chars")})
    d = cfg.dedup
    tables = f"{d.input_table} -> {d.tables.documents} -> {d.tables.output}"
    if not absent("dedup", tables, d.input_table, (d.input_table, d.tables.documents, d.tables.output),
                  f"{d.tables.documents} or {d.tables.output} is absent: run python -m jobs.dedup.job"):
        decision, out = col(d.tables.documents, "reason"), fates.present(d.tables.output)
        # kept by the decision (or never decided), absent from the output: the paragraph pass left it too short,
        # or contamination dropped it
        later = F.when(~out, F.coalesce(col(d.tables.contamination, "reason").cast("string"),
                                         F.lit("too_short_after_paragraphs")))
        reason = F.coalesce(decision, later)
        ways["dedup"] = Way("dedup", tables, d.input_table, reason=reason,
                            outcome=F.when(reason.isNull(), KEPT).otherwise(DROPPED),
                            measures={"chars": col(d.tables.output, "chars")})
    name = cfg.tokenize.input_table
    tables = f"{name} -> gold.tokens"
    if not absent("tokenize", tables, name, (name, "gold.tokens"), "gold.tokens is absent: run python -m jobs.tokens"):
        gold = fates.present("gold.tokens")
        ways["tokenize"] = Way("tokenize", tables, name, outcome=F.when(gold, KEPT).otherwise(DROPPED),
                               reason=F.when(~gold, F.lit("not_tokenized")),
                               measures={"tokens": col("gold.tokens", "tokens")})
    manifest = storage.join(lake.paths.shards_dir, "manifest.json")
    tables, lineage = "gold.tokens -> shards + manifest.json", cfg.export.lineage_table
    if not fates.has("gold.tokens") or not storage.exists(manifest):
        ways["export"] = Way("export", tables, "gold.tokens", why=f"{manifest} is absent: run python -m jobs.export")
    else:
        # a lake exported before gold.shard_lineage existed: every document of gold.tokens counts as exported
        written = fates.present(lineage) if fates.has(lineage) else F.lit(True)
        ways["export"] = Way("export", tables, "gold.tokens", outcome=F.when(written, KEPT).otherwise(DROPPED),
                             reason=F.when(~written, F.lit("not_in_mix")))
    return ways


def _decided(fates: Fates, tally: Tally, way: Way, *outcomes: str, measures: dict | None = None, by_reason=False):
    """The question "how many documents of the stage's input got one of `outcomes`" (per reason if `by_reason`)."""
    where = fates.present(way.source) & way.outcome.isin(*outcomes)
    return tally.ask(where, **({"key": way.reason} if by_reason else {}), **(measures or {}))


# -- the stages: each asks its questions of the tally and returns how to build its entry once answered, or its
# -- "not run" entry -----------------------------------------------------------------------------------------
def ingest_stage(lake: Lake, fates: Fates, tally: Tally, ways: dict[str, Way]):
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


def extract_stage(lake: Lake, fates: Fates, tally: Tally, ways: dict[str, Way]):
    way = ways["extract"]
    if way.why:
        return _not_run("extract", way.tables, way.why)
    html = {"html_bytes": fates.col("bronze.pages", "html_bytes")}
    by_outcome = _decided(fates, tally, way, DROPPED, measures=html, by_reason=True)
    pages = tally.ask(fates.present(way.source), **html)
    kept = _decided(fates, tally, way, KEPT, measures=_text(fates, "silver.documents"))
    return lambda: _stage("extract", way.tables, tally.one(pages), tally.one(kept), tally.many(by_outcome))


def quality_stage(lake: Lake, fates: Fates, tally: Tally, ways: dict[str, Way]):
    from pyspark.sql import functions as F

    cfg, way = lake.cfg.quality, ways["quality"]
    if way.why:
        return _not_run("quality", way.tables, way.why)
    text = _text(fates, cfg.input_table)
    dropped = _decided(fates, tally, way, DROPPED, measures=text, by_reason=True)
    flagged = _decided(fates, tally, way, FLAGGED, measures=text, by_reason=True)
    signals = fates.present(cfg.tables.signals)
    types = [c.removeprefix("pii_") for c in lake.table(cfg.tables.signals).columns if c.startswith("pii_")]
    pii = {t: (tally.ask(signals, weight=fates.col(cfg.tables.signals, f"pii_{t}")),
               tally.ask(signals & (F.col(fates.col(cfg.tables.signals, f"pii_{t}")) > 0))) for t in types}
    stage_input = tally.ask(fates.present(way.source), **text)
    stage_kept = _decided(fates, tally, way, KEPT, FLAGGED, measures=_text(fates, cfg.tables.output))

    def finish() -> dict:
        return _stage("quality", way.tables, tally.one(stage_input), tally.one(stage_kept), tally.many(dropped),
                      filter_mode=cfg.mode, flagged=tally.many(flagged),
                      pii_found={t: tally.one(q)["documents"] for t, (q, _) in pii.items()},
                      documents_with_pii={t: tally.one(q)["documents"] for t, (_, q) in pii.items()})
    return finish


def dedup_stage(lake: Lake, fates: Fates, tally: Tally, ways: dict[str, Way]):
    from pyspark.sql import functions as F

    cfg, way = lake.cfg.dedup, ways["dedup"]
    if way.why:
        return _not_run("dedup", way.tables, way.why)
    source, text = fates.present(way.source), _text(fates, cfg.input_table)
    dropped = _decided(fates, tally, way, DROPPED, measures=text, by_reason=True)
    not_decided = tally.ask(source & ~fates.present(cfg.tables.documents))
    kept = _decided(fates, tally, way, KEPT, measures=_text(fates, cfg.tables.output))
    stage_input = tally.ask(source, **text)
    kept_before = _decided(fates, tally, way, KEPT, measures={"chars": text["chars"]})   # before the paragraph pass
    clusters = lake.table(cfg.tables.documents).groupBy("cluster_id").agg(F.count(F.lit(1)).alias("size"))
    sizes = tally.measure(clusters, key="size")

    def finish() -> dict:
        largest = [r.asDict() for r in clusters.orderBy(F.desc("size"), "cluster_id").limit(5).collect()]
        return _stage("dedup", way.tables, tally.one(stage_input), tally.one(kept), tally.many(dropped),
                      not_decided=tally.one(not_decided)["documents"],
                      chars_cut_from_kept=max(0, tally.one(kept_before)["chars"] - tally.one(kept)["chars"]),
                      cluster_sizes=dict(sorted((int(k), v) for k, v in tally.counts(sizes).items())),
                      largest_clusters=largest)
    return finish


def tokenize_stage(lake: Lake, fates: Fates, tally: Tally, ways: dict[str, Way]):
    way = ways["tokenize"]
    if way.why:
        return _not_run("tokenize", way.tables, way.why)
    text = _text(fates, way.source)
    kept = _decided(fates, tally, way, KEPT, measures={**text, "tokens": fates.col("gold.tokens", "tokens")})
    dropped = _decided(fates, tally, way, DROPPED, measures=text, by_reason=True)
    stale = tally.ask(fates.present("gold.tokens") & ~fates.present(way.source))
    stage_input = tally.ask(fates.present(way.source), **text)
    return lambda: _stage("tokenize", way.tables, tally.one(stage_input), tally.one(kept), tally.many(dropped),
                          gold_rows_not_in_input=tally.one(stale)["documents"])


def export_stage(lake: Lake, fates: Fates, tally: Tally, ways: dict[str, Way]):
    way = ways["export"]
    if way.why:
        return _not_run("export", way.tables, way.why)
    manifest_path = storage.join(lake.paths.shards_dir, "manifest.json")
    manifest = json.loads(storage.read_text(manifest_path))
    tokens = {"tokens": fates.col("gold.tokens", "tokens")}
    stage_input = tally.ask(fates.present(way.source), **tokens)
    kept = _decided(fates, tally, way, KEPT, measures=tokens)
    left_out = _decided(fates, tally, way, DROPPED, measures=tokens, by_reason=True)
    totals = manifest.get("totals", {})
    return lambda: _stage("export", way.tables, tally.one(stage_input), tally.one(kept), tally.many(left_out),
                          manifest=manifest_path, shards=len(manifest.get("shards", [])),
                          sequences=int(totals.get("documents", 0)), shard_tokens=int(totals.get("tokens", 0)),
                          mix=manifest.get("mix", {}).get("name"), realized_mix=realized_mix(manifest.get("mix", {})))


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
               verdict=None if share is None else verdict(share, target))
    return out


def verdict(share: float, target: list[float]) -> str:
    """The kept text share against `report.target_kept_share`, judged as it is shown (to 0.1 %): a share of 0.2004
    is printed 20.0 %, and must not read "above target" beside it."""
    shown = round(share, 3)
    return "below target" if shown < target[0] else "above target" if shown > target[1] else "within target"


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
        ways = stage_ways(lake, fates)
        pending = {name: reader(lake, fates, tally, ways) for name, reader in STAGE_READERS}  # a builder, or not run
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
