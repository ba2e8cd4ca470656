"""Run the pipeline's quality job on a JSONL file: score local data with the signals and filters the pipeline uses.

    python -m jobs.quality_files IN.jsonl OUT_DIR [-o quality.mode=flag] [--master local[4]] [--keep-lake]

IN.jsonl has one `{"id": ..., "text": ...}` per line (what `python -m jobs.text.extract_files` writes; its dropped
pages, with empty text, are dropped here as `empty`).  The lines become a `silver.documents` table in a scratch
lake (doc_id = id), then `jobs.quality.job.QualityJob` runs on it with conf/jobs.yaml's settings (and any `-o`),
the same code, models and config the pipeline uses.  Written:
    OUT_DIR/docs.jsonl    {id, keep, reason, language, language_score, quality_score, signals}: one line per input
                          document, in input order; reason is the first failing rule (null when kept; with
                          quality.mode=flag every document is kept and reason is the rule it would fail); signals
                          holds every signal column of silver.signals (heuristics, PII counts, enabled scorers)
    OUT_DIR/kept.jsonl    {id, text}: the kept documents as silver.quality holds them (C4's line removal where the
                          language is routed to it, PII replaced by typed placeholders): `python -m
                          jobs.dedup_files OUT_DIR/kept.jsonl DEDUP_DIR` takes it as it is
    OUT_DIR/metrics.json  the job's report (documents in and out, drops by reason, languages, PII found)
The scratch lake is thrown away at the end, unless --keep-lake keeps it in OUT_DIR/lake: a rerun with the same OUT_DIR
then reuses it, so that a new threshold or mode re-decides from the stored signals and scores no document again.
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from jobs.scratch_lake import command_parser, read_jsonl, scratch_lake, write_documents


def document_lines(docs: list[dict], view: dict[str, dict], kept: dict[str, dict], signal_names: list[str]):
    """One docs.jsonl row per input document: the filter view's decision, and C4's `c4_no_lines_left` for a kept
    document whose every line the line removal took (it is in the view as kept, not in silver.quality)."""
    for d in docs:
        row = view[d["doc_id"]]
        reason = row["drop_reason"]
        if reason is None and d["doc_id"] not in kept:
            reason = "c4_no_lines_left"
        elif d["doc_id"] in kept:
            reason = kept[d["doc_id"]]["drop_reason"]   # flag mode: the rule it would fail, or c4_no_lines_left
        yield {"id": d["doc_id"], "keep": d["doc_id"] in kept, "reason": reason, "language": row["language"],
               "language_score": row["language_score"], "quality_score": row["quality_score"],
               "signals": {name: row[name] for name in signal_names}}


def main(argv=None) -> int:
    args = command_parser("python -m jobs.quality_files", __doc__,
                          "quality.routing.default.min_language_score=0.5").parse_args(argv)

    from jobs.config import load_jobs_config
    from jobs.quality import signals
    from jobs.quality.job import QualityJob, filtered_view

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs = read_jsonl(args.input)
    cfg = load_jobs_config(args.override)
    start = time.monotonic()
    # a kept lake is reused: the job scores only documents whose text or signal settings changed since
    with scratch_lake(out, args.keep_lake, cfg, args.master, "quality", reuse=True) as (spark, paths, lake):
        write_documents(spark, docs, paths.table(cfg.quality.input_table))
        overrides = [x for o in args.override for x in ("-o", o)]
        metrics = QualityJob().run(["--lake", str(lake), *overrides])
        signal_names = [c for c in signals.signal_columns(dict(cfg.quality.scorers or {}))
                        if c not in ("language", "language_score")]
        view = {r["doc_id"]: r.asDict() for r in filtered_view(spark, cfg.quality, paths.table)
                .select("doc_id", "language", "language_score", "quality_score", "drop_reason", *signal_names)
                .collect()}
        kept = {r["doc_id"]: r.asDict() for r in spark.read.format("delta")
                .load(paths.table(cfg.quality.tables.output)).select("doc_id", "text", "drop_reason").collect()}
    reasons: Counter = Counter()
    with open(out / "docs.jsonl", "w", encoding="utf-8") as f:
        for line in document_lines(docs, view, kept, signal_names):
            reasons[line["reason"]] += not line["keep"]
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    with open(out / "kept.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            if d["doc_id"] in kept:
                f.write(json.dumps({"id": d["doc_id"], "text": kept[d["doc_id"]]["text"]}, ensure_ascii=False) + "\n")
    report = {**metrics.as_dict(), "wall_s": round(time.monotonic() - start, 2), "documents": len(docs),
              "kept": len(kept)}
    (out / "metrics.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    dropped = ", ".join(f"{reason} {n}" for reason, n in reasons.most_common() if n) or "none"
    print(f"quality_files: {len(docs)} documents -> kept {len(kept)}, dropped {len(docs) - len(kept)} ({dropped}), "
          f"in {report['wall_s']} s; wrote {out}/docs.jsonl, kept.jsonl, metrics.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
