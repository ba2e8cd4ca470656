"""Run the pipeline's dedup job on a JSONL file: the evaluation entry point.

    python -m jobs.dedup_files IN.jsonl OUT_DIR [-o dedup.minhash.verify=false] [--keep-lake]

IN.jsonl has one `{"id": ..., "text": ...}` per line.  The lines become a `silver.documents` table in a
scratch lake (doc_id = id; no URL or fetch time, so survivors fall back to the smallest id), then
`jobs.dedup.job.DedupJob` runs on it with conf/jobs.yaml's settings, the same code and config the
pipeline uses.  Written:
    OUT_DIR/pairs.jsonl   {a, b, jaccard}: the duplicate pairs found (jaccard >= the threshold; exact
                          Jaccard when dedup.minhash.verify is on, else the signatures' estimate)
    OUT_DIR/docs.jsonl    {id, cluster_id, keep, survivor, reason}: one line per input document; keep is the
                          document-level decision (URL, exact, near duplicate)
    OUT_DIR/metrics.json  the job's report (stages, drops by reason, timings)
`python -m bench.dedup_score` scores both against brute-force pairs.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from jobs.scratch_lake import command_parser, read_jsonl, scratch_lake, write_documents


def expand_copies(pairs, decision) -> dict[tuple[str, str], float]:
    """The job scores one document per normalized text (exact copies share every shingle): every copy of
    `a` pairs with every copy of `b` at the same Jaccard, and copies pair with each other at 1.0."""
    copies: dict[str, list[str]] = {}
    for doc_id, r in decision.items():
        if r["text_key"] is not None:
            copies.setdefault(r["text_key"], []).append(doc_id)
    found: dict[tuple[str, str], float] = {}
    for group in copies.values():
        for i, a in enumerate(sorted(group)):
            for b in sorted(group)[i + 1:]:
                found[(a, b)] = 1.0
    for r in pairs:
        for a in copies.get(decision[r["a"]]["text_key"], [r["a"]]):
            for b in copies.get(decision[r["b"]]["text_key"], [r["b"]]):
                if a != b:
                    found[tuple(sorted((a, b)))] = float(r["jaccard"])
    return found


def main(argv=None) -> int:
    args = command_parser("python -m jobs.dedup_files", __doc__, "dedup.minhash.threshold=0.85").parse_args(argv)

    from jobs.config import load_jobs_config
    from jobs.dedup.job import DedupJob

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs = read_jsonl(args.input)
    cfg = load_jobs_config(args.override)
    start = time.monotonic()
    with scratch_lake(out, args.keep_lake, cfg, args.master, "dedup") as (spark, paths, lake):
        from pyspark.sql import functions as F

        write_documents(spark, docs, paths.table(cfg.dedup.input_table))
        overrides = [x for o in args.override for x in ("-o", o)]
        metrics = DedupJob().run(["--lake", str(lake), "--full", *overrides])
        pairs = (spark.read.format("delta").load(paths.table(cfg.dedup.tables.pairs))
                 .where(F.col("jaccard") >= cfg.dedup.minhash.threshold).orderBy("a", "b").collect())
        decision = {r["doc_id"]: r for r in spark.read.format("delta").load(paths.table(cfg.dedup.tables.documents))
                    .collect()}
    found = expand_copies(pairs, decision)
    with open(out / "pairs.jsonl", "w", encoding="utf-8") as f:
        for (a, b), j in sorted(found.items()):
            f.write(json.dumps({"a": a, "b": b, "jaccard": round(j, 6)}) + "\n")
    with open(out / "docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            r = decision[d["doc_id"]]
            f.write(json.dumps({"id": d["doc_id"], "cluster_id": r["cluster_id"], "keep": bool(r["keep"]),
                                "survivor": r["survivor_id"], "reason": r["drop_reason"]}) + "\n")
    report = {**metrics.as_dict(), "wall_s": round(time.monotonic() - start, 2), "documents": len(docs),
              "pairs_written": len(found)}
    (out / "metrics.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"dedup_files: {len(docs)} documents -> {len(found)} pairs, "
          f"{sum(1 for r in decision.values() if not r['keep'])} dropped, in {report['wall_s']} s; wrote {out}/pairs.jsonl, docs.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
