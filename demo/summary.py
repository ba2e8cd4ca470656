"""The demo's closing summary: what each stage produced, read back from the files it wrote."""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import storage
from conf.paths import Paths

TABLES = ("bronze.pages", "silver.documents", "silver.quality", "silver.deduped", "gold.tokens")


def build_summary(paths: Paths, stage_seconds: dict[str, float], total_seconds: float,
                  seen_path: str) -> dict[str, Any]:
    crawl = _read_json(paths.crawl_stats)
    manifest_path = storage.join(paths.shards_dir, "manifest.json")
    manifest = _read_json(manifest_path)
    result = _read_json(storage.join(paths.train_dir, "result.json"))
    seen = ([json.loads(line) for line in storage.read_text(seen_path).splitlines()]
            if storage.exists(seen_path) else [])
    return {
        "seconds": {"total": round(total_seconds, 1), **stage_seconds},
        "crawl": {k: crawl.get(k) for k in ("pages_fetched", "requests", "responses_by_status", "robots_denied",
                                             "errors", "warc_files", "warc_records", "warc_bytes", "hosts", "render")},
        "models": _models(paths),
        "report": _report(paths),
        "tables": {name: _table_summary(paths, name) for name in TABLES},
        "jobs": {job: _read_json(storage.join(paths.lake, "_metrics", f"{job}.json"))
                 for job in ("ingest", "extract", "quality", "dedup", "tokenize", "export")},
        "shards": {
            "manifest": str(manifest_path),
            "manifest_sha256": manifest.get("sha256"),
            "count": len(manifest.get("shards", [])),
            "documents": manifest.get("totals", {}).get("documents"),
            "tokens": manifest.get("totals", {}).get("tokens"),
            "tokenizer_sha256": manifest.get("tokenizer", {}).get("sha256"),
            "vocab_size": manifest.get("tokenizer", {}).get("vocab_size"),
        },
        "train": {k: result.get(k) for k in ("run_id", "steps", "first_loss", "last_loss", "tokens_seen",
                                              "checkpoint", "lineage")},
        "provenance": {"documents_seen": len(seen), "listing": str(seen_path),
                       "hosts": sorted({urlsplit(d["url"]).hostname or "?" for d in seen})},
        "mlflow": {
            "tracking_uri": paths.mlflow_tracking_uri,
            "run_id": result.get("run_id"),
            "ui": f"make mlflow-ui  (or: mlflow ui --backend-store-uri {paths.mlflow_tracking_uri})",
        },
    }


def _models(paths: Paths) -> dict[str, Any]:
    """What the quality models the demo trained say about themselves (their model.json), when it trained them."""
    out = {}
    kenlm = storage.join(paths.lake, "models", "kenlm")
    for language_model in (storage.glob(kenlm, "model.json") if storage.exists(kenlm) else []):
        meta = _read_json(language_model)
        out[f"kenlm.{meta.get('language')}"] = {k: meta.get(k) for k in ("documents", "tokens", "cutoffs")}
    classifier = _read_json(storage.join(paths.lake, "models", "quality_classifier", "model.json"))
    if classifier:
        out["quality_classifier"] = {k: classifier.get(k) for k in ("heldout", "train_docs_per_class", "positives",
                                                                    "negatives") if k in classifier}
    return out


def _report(paths: Paths) -> dict[str, Any]:
    """Where the per-stage report is and what it says overall (jobs/report.py's JSON)."""
    html = storage.join(paths.lake, "_report", "report.html")
    report = _read_json(storage.join(paths.lake, "_report", "report.json"))
    overall = report.get("overall") or {}
    return {"html": html if report else None, "json": storage.join(paths.lake, "_report", "report.json"),
            "kept_text_share": overall.get("kept_text_share"), "verdict": overall.get("verdict"),
            "stages": {s["stage"]: (s.get("kept") or {}).get("documents") for s in report.get("stages", [])}}


def render_summary(summary: dict[str, Any]) -> str:
    crawl, shards, train, tables = summary["crawl"], summary["shards"], summary["train"], summary["tables"]
    seconds = summary["seconds"]
    lines = ["", "weblm demo: summary", "=" * 60,
             f"crawl     {crawl['pages_fetched']} pages fetched ({crawl['requests']} requests, "
             f"{crawl['robots_denied']} denied by robots.txt) over {len(crawl.get('hosts') or [])} hosts",
             f"          statuses {crawl['responses_by_status']}  errors {crawl['errors']}",
             f"WARC      {crawl['warc_files']} files, {crawl['warc_records']} records, "
             f"{_mb(crawl['warc_bytes'])}"]
    render = crawl.get("render") or {}
    if render.get("html_pages"):
        lines.append(f"render    {render.get('renders', 0)} of {render['html_pages']} HTML pages sent to Chromium: "
                     f"{render.get('ok', 0)} rendered (+{render.get('text_chars_gained', 0)} visible characters), "
                     f"{render.get('renders', 0) - render.get('ok', 0)} failed with the plain HTML kept")
    for name, model in (summary.get("models") or {}).items():
        lines.append(f"model     {name}: {json.dumps(model, sort_keys=True)[:160]}")
    for name in TABLES:
        t = tables[name]
        lines.append(f"{name:<18}{t['rows']:>8} rows  (Delta version {t['version']})")
    for job, metrics in summary["jobs"].items():
        skipped = {k: v for k, v in (metrics.get("skipped") or {}).items() if k not in ("other_record_type",
                                                                                       "not_fetched")}
        if skipped:
            lines.append(f"  {job} skipped {skipped}")
    unfetched = (summary["jobs"].get("ingest") or {}).get("unfetched_by_reason") or {}
    lines.append(f"unfetched {sum(unfetched.values())} records of URLs the crawl did not fetch {unfetched} "
                 "(bronze.unfetched); what became of any URL: python -m jobs.fate URL (the lake), "
                 "python -m spider.lookup URL (the crawl's frontier)")
    lines += [f"shards    {shards['count']} shards, {shards['documents']} documents, {shards['tokens']} tokens "
              f"(vocab {shards['vocab_size']}, tokenizer {str(shards['tokenizer_sha256'])[:12]})",
              f"train     {train['steps']} steps, loss {_f(train['first_loss'])} -> {_f(train['last_loss'])}, "
              f"{train['tokens_seen']} tokens seen",
              f"          checkpoint {train['checkpoint']}",
              f"          lineage    {train['lineage']}",
              f"          the checkpoint saw {summary['provenance']['documents_seen']} documents from "
              f"{len(summary['provenance']['hosts'])} hosts: {summary['provenance']['listing']}",
              f"report    {(summary.get('report') or {}).get('html')} (kept text share "
              f"{_f((summary.get('report') or {}).get('kept_text_share'))}, "
              f"{(summary.get('report') or {}).get('verdict')})",
              f"MLflow    run {summary['mlflow']['run_id']} in {summary['mlflow']['tracking_uri']}",
              f"          UI: {summary['mlflow']['ui']}",
              "time      " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()),
              f"summary   {summary.get('summary_path', '')}", ""]
    return "\n".join(lines)


def _table_summary(paths: Paths, name: str) -> dict[str, Any]:
    # delta-rs reads the table without a JVM: an independent check of what Spark wrote.
    from deltalake import DeltaTable

    location = paths.table(name)
    try:
        table = DeltaTable(location, storage_options=storage.object_store_options(location) or None)
    except Exception as exc:  # a missing table is reported in the summary, not fatal to it
        return {"path": location, "rows": 0, "version": None, "error": str(exc).splitlines()[0]}
    return {"path": location, "rows": table.to_pyarrow_dataset().count_rows(), "version": table.version()}


def _read_json(path: str) -> dict[str, Any]:
    return json.loads(storage.read_text(path)) if storage.exists(path) else {}


def _mb(n: Any) -> str:
    return f"{n / 1e6:.2f} MB" if isinstance(n, (int, float)) else "?"


def _f(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "?"
