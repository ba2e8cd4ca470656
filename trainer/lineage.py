"""`lineage/batches.jsonl` (SEAMS §5): one line per step, the samples and the doc_ids they drew tokens from.

Written as the run goes (flushed per step), so a killed run keeps the lineage of the steps it
took; a resume first drops the lines of steps the checkpoint does not include.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Iterator

log = logging.getLogger(__name__)


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
    def __init__(self, path: Path, keep_before: int):
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
        doc_ids = sorted({d for s in samples for d in s["doc_ids"]})
        self._handle.write(json.dumps({"step": step, "samples": samples, "doc_ids": doc_ids}) + "\n")
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
