"""`lineage/batches.jsonl` (SEAMS §5): one line per training step.

A step's global batch is a pure function of (seed, step, shards, the batches a rollback left out)
(trainer/data.py), so the line need not list it: with `lineage.detail: digest` (the default) it holds the
step, the global batch it drew and the sha256 of that batch's lineage records, and `trainer.provenance`
recomputes the samples and documents on demand and checks them against the digest.  `full` also writes
the records (samples, sequences, doc_ids): 100x larger, readable without the shards.

Written as the run goes (flushed per step), so a killed run keeps the lineage of the steps it
took; a resume first drops the lines of steps the checkpoint does not include.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterable, Iterator

log = logging.getLogger(__name__)
DETAILS = ("digest", "full")


def batch_digest(samples: list[dict[str, Any]]) -> str:
    """sha256 of a global batch's lineage records (trainer.data.lineage_record), in a canonical JSON form."""
    canonical = json.dumps(samples, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_lines(lines: Iterable[str], where: str) -> Iterator[dict[str, Any]]:
    """The step records of a lineage file; a line a killed run left half-written is skipped with a warning."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            int(record["step"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s line %d is not a whole step record (%s: %s); skipped (a run killed mid-write "
                        "leaves one)", where, number, type(exc).__name__, exc)
            continue
        yield record


class LineageWriter:
    def __init__(self, path: Path, keep_before: int, detail: str = "digest"):
        if detail not in DETAILS:
            raise ValueError(f"lineage.detail must be one of {DETAILS}, got {detail!r}")
        self.detail = detail
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if keep_before > 0 and path.exists():
            kept = [json.dumps(r) for r in parse_lines(path.read_text().splitlines(), str(path))
                    if r["step"] < keep_before]
        path.write_text("".join(line + "\n" for line in kept))
        self._handle = open(path, "a")

    def rewind(self, before_step: int) -> None:
        """Drop the records of steps >= before_step (a rollback trains them again)."""
        self._handle.close()
        path = Path(self._handle.name)
        kept = [json.dumps(r) for r in parse_lines(path.read_text().splitlines(), str(path))
                if r["step"] < before_step]
        path.write_text("".join(line + "\n" for line in kept))
        self._handle = open(path, "a")

    def write(self, step: int, samples: list[dict[str, Any]]) -> None:
        record = {"step": step, "batch": samples[0]["index"] // len(samples), "samples_in_batch": len(samples),
                  "digest": batch_digest(samples)}
        if self.detail == "full":
            record |= {"samples": samples, "doc_ids": sorted({d for s in samples for d in s["doc_ids"]})}
        self._handle.write(json.dumps(record) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class NoLineage:
    """What every rank but 0 writes: rank 0's record already holds the whole global batch."""

    def write(self, step: int, samples: list[dict[str, Any]]) -> None:
        return None

    def rewind(self, before_step: int) -> None:
        return None

    def close(self) -> None:
        return None
