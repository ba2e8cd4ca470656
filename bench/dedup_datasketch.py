"""The reference: datasketch's MinHashLSH on a JSONL corpus, written in `jobs.dedup_files`' format.

    .venv/bin/python bench/dedup_datasketch.py IN.jsonl OUT_DIR [--threshold 0.8] [--num-perm 128]

Same shingles as the job (word 5-grams of jobs.dedup.normalize.words_of).  Pairs: every LSH candidate
pair (datasketch verifies nothing); clusters: connected components of those pairs, the smallest id of
each kept.  Score it with bench/dedup_score.py like the job's output.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    from datasketch import MinHash, MinHashLSH

    from jobs.dedup.normalize import words_of

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("out_dir")
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--num-perm", type=int, default=128)
    args = parser.parse_args(argv)
    docs = [json.loads(line) for line in open(args.input, encoding="utf-8") if line.strip()]
    lsh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm)
    signatures = {}
    for d in docs:
        words = words_of(d["text"])
        shingles = {" ".join(words[i:i + 5]) for i in range(max(1, len(words) - 4))} if words else set()
        m = MinHash(num_perm=args.num_perm)
        m.update_batch([s.encode() for s in shingles])
        signatures[str(d["id"])] = m
        lsh.insert(str(d["id"]), m)
    pairs = set()
    for doc_id, m in signatures.items():
        for other in lsh.query(m):
            if other != doc_id:
                pairs.add(tuple(sorted((doc_id, other))))
    parent = {d: d for d in signatures}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pairs.jsonl", "w") as f:
        for a, b in sorted(pairs):
            f.write(json.dumps({"a": a, "b": b, "jaccard": signatures[a].jaccard(signatures[b])}) + "\n")
    with open(out / "docs.jsonl", "w") as f:
        for d in signatures:
            root = find(d)
            f.write(json.dumps({"id": d, "cluster_id": root, "keep": root == d,
                                "survivor": None if root == d else root}) + "\n")
    print(f"datasketch MinHashLSH(threshold={args.threshold}, num_perm={args.num_perm}): {len(docs)} documents, {len(pairs)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
