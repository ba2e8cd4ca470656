"""A run's files in one local folder (SEAMS §5), and where that folder is: `paths.train_dir` itself, or, when it is
a URI, a staging folder of its own under `paths.train_staging` (one per machine when the ranks span machines without
a shared staging file system).  trainer/run_folder.py writes and uploads them; trainer/node_folders.py is what the
other ranks see.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from storage import is_uri

LINEAGE = "lineage/batches.jsonl"
RESULT = "result.json"


@dataclass(frozen=True)
class RunFiles:
    """The run's files in one local folder (SEAMS §5)."""
    out: Path

    @property
    def checkpoints(self) -> Path:
        return self.out / "checkpoints"

    @property
    def lineage(self) -> Path:
        return self.out / LINEAGE

    @property
    def result(self) -> Path:
        return self.out / RESULT

    def cache(self, manifest_sha: str) -> Path:
        # Per manifest: megatron's index cache key does not cover file contents.
        return self.out / "cache" / manifest_sha[:16]


def staging_per_machine(train_dir: str, shared_staging: bool, environ=os.environ) -> bool:
    """Whether each machine has a staging folder of its own: a remote train_dir, ranks on several machines
    (torchrun's WORLD_SIZE over LOCAL_WORLD_SIZE) and `paths.train_staging` not one shared file system."""
    world = int(environ.get("WORLD_SIZE", "1"))
    local = int(environ.get("LOCAL_WORLD_SIZE", world))
    return is_uri(train_dir) and world > local and not shared_staging


def node_staging(train_dir: str, sharded: bool, shared_staging: bool, environ=os.environ) -> bool:
    """Whether each machine stages and uploads its own ranks' shards: sharded checkpoints, staging per machine."""
    return sharded and staging_per_machine(train_dir, shared_staging, environ)


def staging_folder(staging_root: str, train_dir: str) -> Path:
    """One staging folder per train_dir, so leftovers are only ever sent where they belong."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", train_dir).strip("-")[-80:]
    return Path(staging_root) / f"{readable}-{hashlib.sha256(train_dir.encode()).hexdigest()[:8]}"
