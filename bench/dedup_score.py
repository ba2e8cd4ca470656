"""Score `python -m jobs.dedup_files` output against brute-force true pairs.

    .venv/bin/python bench/dedup_score.py TRUTH.jsonl OUT_DIR [--threshold 0.8] [--json]

TRUTH.jsonl: {a, b, jaccard} for every pair at J >= some floor below the threshold (bench/dedup_corpus.py
writes J >= 0.5); a pair it does not list has a lower Jaccard.  OUT_DIR holds pairs.jsonl and docs.jsonl.
Pairs: precision and recall of OUT_DIR/pairs.jsonl against the true pairs at J >= threshold, recall per
Jaccard band (0.80-0.85 is where LSH misses), and the precision of the pairs implied by the clusters.
Removal: the fraction of true pairs with both documents kept, dropped documents whose survivor is kept and
at J >= threshold with them, dropped documents with no kept duplicate at all.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from itertools import combinations


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def score(truth_rows: list[dict], pair_rows: list[dict], doc_rows: list[dict], threshold: float) -> dict:
    jac = {tuple(sorted((r["a"], r["b"]))): r["jaccard"] for r in truth_rows}
    truth = {p for p, j in jac.items() if j >= threshold}
    found = {tuple(sorted((r["a"], r["b"]))) for r in pair_rows}
    tp = len(found & truth)
    result = {"threshold": threshold, "true_pairs": len(truth), "found_pairs": len(found),
              "pair_precision": tp / len(found) if found else 1.0, "pair_recall": tp / len(truth) if truth else 1.0}
    bands = [(threshold, 0.85), (0.85, 0.9), (0.9, 0.95), (0.95, 1.01)]
    result["recall_by_band"] = {}
    for lo, hi in bands:
        band = {p for p in truth if lo <= jac[p] < hi}
        result["recall_by_band"][f"{lo:.2f}-{min(hi, 1):.2f}"] = {
            "pairs": len(band), "recall": (len(band & found) / len(band)) if band else None}
    fps = [jac.get(p, 0.0) for p in found - truth]
    result["false_positive_jaccard"] = {"< 0.5": sum(1 for j in fps if j < 0.5),
                                        "0.5-0.7": sum(1 for j in fps if 0.5 <= j < 0.7),
                                        f"0.7-{threshold}": sum(1 for j in fps if 0.7 <= j < threshold)}
    docs = {r["id"]: r for r in doc_rows}
    clusters = defaultdict(list)
    for r in doc_rows:
        clusters[r["cluster_id"]].append(r["id"])
    implied = {tuple(sorted(p)) for members in clusters.values() if len(members) > 1 for p in combinations(members, 2)}
    result["cluster_pair_precision"] = len(implied & truth) / len(implied) if implied else 1.0
    result["largest_cluster"] = max((len(m) for m in clusters.values()), default=0)
    # removal
    both_kept = [p for p in truth if docs[p[0]]["keep"] and docs[p[1]]["keep"]]
    dropped = [r for r in doc_rows if not r["keep"]]
    dup_of = defaultdict(set)
    for a, b in truth:
        dup_of[a].add(b)
        dup_of[b].add(a)
    survivor_ok = sum(1 for r in dropped if r.get("survivor") and docs[r["survivor"]]["keep"]
                      and tuple(sorted((r["id"], r["survivor"]))) in truth)
    some_kept = sum(1 for r in dropped if any(docs[o]["keep"] for o in dup_of[r["id"]]))
    result.update(
        documents=len(doc_rows), dropped=len(dropped),
        true_pairs_both_kept=len(both_kept), true_pairs_both_kept_fraction=len(both_kept) / len(truth) if truth else 0.0,
        dropped_with_kept_survivor_at_threshold=survivor_ok,
        dropped_with_some_kept_duplicate=some_kept,
        dropped_without_kept_duplicate=len(dropped) - some_kept,
        docs_with_true_duplicate=len(dup_of))
    return result


def report(r: dict) -> str:
    lines = [f"pairs at J >= {r['threshold']}: {r['true_pairs']} true, {r['found_pairs']} found; "
             f"precision {r['pair_precision']:.4f}, recall {r['pair_recall']:.4f}"]
    for band, v in r["recall_by_band"].items():
        lines.append(f"  recall J {band}: {v['recall'] if v['recall'] is None else round(v['recall'], 4)} ({v['pairs']} pairs)")
    lines.append(f"  false positives by true Jaccard: {r['false_positive_jaccard']}")
    lines.append(f"  pairs implied by clusters: precision {r['cluster_pair_precision']:.4f} (largest cluster {r['largest_cluster']})")
    lines.append(f"removal: {r['dropped']} of {r['documents']} dropped; true pairs with both kept "
                 f"{r['true_pairs_both_kept']} ({100 * r['true_pairs_both_kept_fraction']:.2f}%); dropped with a kept survivor "
                 f"at J >= {r['threshold']}: {r['dropped_with_kept_survivor_at_threshold']}/{r['dropped']}; dropped without "
                 f"any kept duplicate: {r['dropped_without_kept_duplicate']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("truth")
    parser.add_argument("out_dir")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    args = parser.parse_args(argv)
    r = score(load(args.truth), load(f"{args.out_dir}/pairs.jsonl"), load(f"{args.out_dir}/docs.jsonl"), args.threshold)
    print(json.dumps(r, indent=2) if args.json else report(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
