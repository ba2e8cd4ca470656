"""`lineage/batches.jsonl` (SEAMS §5): one line per step, the samples and the doc_ids they drew tokens from.

Written as the run goes (flushed per step), so a killed run keeps the lineage of the steps it
took; a resume first drops the lines of steps the checkpoint does not include.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class LineageWriter:
    def __init__(self, path: Path, keep_before: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if keep_before > 0 and path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] < keep_before]
        path.write_text("".join(line + "\n" for line in kept))
        self._handle = open(path, "a")

    def write(self, step: int, samples: list[dict[str, Any]]) -> None:
        doc_ids = sorted({d for s in samples for d in s["doc_ids"]})
        self._handle.write(json.dumps({"step": step, "samples": samples, "doc_ids": doc_ids}) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
