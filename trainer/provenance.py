"""Which documents did a checkpoint see?  `python -m trainer.provenance CHECKPOINT [--out FILE]`

Reads the run's `lineage/batches.jsonl` up to the checkpoint's step and the manifest's `docs.jsonl`
sidecars, and names every document the model trained on: doc_id, URL, how many samples drew on it,
and the first step that did.  The doc_id leads on to `silver.documents`, `bronze.pages` and the WARC
record (SEAMS §3), so a checkpoint traces back to the fetched URL.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from trainer.checkpoint import CheckpointError, read_checkpoint
from trainer.manifest import ManifestError, load_manifest


@dataclass(frozen=True)
class SeenDocument:
    doc_id: str
    url: str
    samples: int        # training samples (sequences of seq_length tokens) that drew tokens from it
    first_step: int


def documents_seen(checkpoint: Path, lineage: Path | None = None) -> tuple[dict, list[SeenDocument]]:
    """The checkpoint's meta and every document its training steps drew from, most used first."""
    payload = read_checkpoint(checkpoint)
    meta = payload["meta"]
    steps = payload["progress"]["step"]          # steps completed: the updates of steps 0..steps-1
    lineage = lineage or checkpoint.parent.parent / "lineage" / "batches.jsonl"
    if not lineage.exists():
        raise CheckpointError(f"no lineage file {lineage} beside {checkpoint}; pass --lineage")
    manifest = load_manifest(meta["manifest_path"], verify=False)
    if manifest.sha256 != meta["manifest_sha256"]:
        raise ManifestError(f"{manifest.path} has changed since {checkpoint} was trained on it "
                            f"({manifest.sha256[:12]} != {meta['manifest_sha256'][:12]}); its doc_ids may not match")
    urls = {}
    for shard in manifest.shards:
        with open(shard.docs_path) as handle:
            urls.update((row["doc_id"], row.get("url", "")) for row in map(json.loads, handle))
    samples, first = Counter(), {}
    covered = set()
    with open(lineage) as handle:
        for line in handle:
            batch = json.loads(line)
            if batch["step"] >= steps:
                continue
            covered.add(batch["step"])
            for sample in batch["samples"]:
                for doc_id in set(sample["doc_ids"]):
                    samples[doc_id] += 1
                    first.setdefault(doc_id, batch["step"])
    missing = steps - len(covered)
    if missing:
        raise CheckpointError(f"{lineage} lacks {missing} of the {steps} steps behind {checkpoint}")
    seen = [SeenDocument(d, urls.get(d, ""), n, first[d]) for d, n in samples.most_common()]
    return meta, seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--lineage", type=Path, help="batches.jsonl (default: <run>/lineage/batches.jsonl)")
    parser.add_argument("--out", type=Path, help="write one JSON line per document here")
    args = parser.parse_args(argv)
    try:
        meta, seen = documents_seen(args.checkpoint, args.lineage)
    except (CheckpointError, ManifestError, OSError) as exc:
        print(f"trainer.provenance: {exc}", file=sys.stderr)
        return 2
    hosts = Counter(urlsplit(d.url).hostname or "?" for d in seen)
    print(f"{args.checkpoint} saw {len(seen)} documents from {len(hosts)} hosts "
          f"(manifest {meta['manifest_sha256'][:12]})")
    for host, n in hosts.most_common():
        print(f"  {n:6d}  {host}")
    if args.out:
        args.out.write_text("".join(json.dumps(d.__dict__) + "\n" for d in seen))
        print(f"documents: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
