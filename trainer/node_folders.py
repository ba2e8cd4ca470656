"""The run folder as the ranks other than 0 see it, and how every rank reads a checkpoint on its own machine.

Rank 0 (trainer/run_folder.py's `RunFolder`) lists, reads, writes and uploads a run's checkpoints, lineage and
result.  Every other rank is a `FollowerFolder`: it writes its own shards and takes part in the collectives.  When
the ranks span machines without shared staging (trainer/run_files.py's `node_staging`), each other machine's local
rank 0 is a `NodeFolder`, which uploads its machine's part of each sharded checkpoint, and on resume every machine
reads the checkpoint from its own downloaded copy (`ReadsPerNode.localize`).
"""
from __future__ import annotations

import logging
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from storage import is_uri, join
from storage.upload import Uploader
from trainer.checkpoint import (NODE_SUMS, SHARDED_NAME, CheckpointError, download_checkpoint, listed_checkpoints,
                                read_checkpoint, save_checkpoint, wait_for_saves)
from trainer.run_files import RunFiles, staging_folder

log = logging.getLogger("trainer.node_folders")


class ReadsPerNode:
    """What the three run folders share when a checkpoint is resumed: per node, every rank reads the checkpoint rank
    0 picked from its own machine's copy, which that machine's local rank 0 (`fetches`) downloads."""

    per_node = False
    fetches = False

    def localize(self, found: tuple[str, dict[str, Any]] | None) -> tuple[str, dict[str, Any]] | None:
        """The checkpoint rank 0 read, as this rank reads it: per node, from its machine's copy (collective)."""
        return localized(self, found, fetch=self.fetches) if self.per_node else found


def durable(upload: Future) -> bool:
    """Whether an upload ended with its object stored (False when it failed or was cancelled)."""
    try:
        return bool(upload.result())
    except Exception:  # noqa: BLE001  (cancelled when the run ends first: it stays staged)
        return False


def download_folder(checkpoint: str, target: Path) -> Path:
    """A stored sharded checkpoint copied to `target` (read_checkpoint verifies it); CheckpointError if it cannot be."""
    began = time.perf_counter()
    try:
        download_checkpoint(checkpoint, target)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{checkpoint} is not whole in the store ({exc})") from exc
    except Exception as exc:  # noqa: BLE001  (any client error: say which object and what to check)
        raise CheckpointError(f"cannot download {checkpoint} ({type(exc).__name__}: {exc}); check that the "
                              "store is reachable (conf/storage.yaml) and resume again") from exc
    log.info("downloaded %s (%.1f MiB) in %.1f s", checkpoint,
             sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) / 2**20, time.perf_counter() - began)
    return target


def fresh_download(checkpoint: str, target: Path) -> Path:
    """`download_folder` into a `downloads/` folder cleared of earlier resumes' sharded downloads first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    drop_downloads(target.parent)
    return download_folder(checkpoint, target)


def drop_downloads(folder: Path) -> None:
    """An earlier resume's sharded downloads: a checkpoint is read from the one folder a resume downloads."""
    for old in folder.iterdir() if folder.is_dir() else ():
        if SHARDED_NAME.match(old.name) and old.is_dir():
            shutil.rmtree(old)


def localized(folder, found: tuple[str, dict[str, Any]] | None, fetch: bool) -> tuple[str, dict[str, Any]] | None:
    """Per node (every rank calls this): the checkpoint rank 0 read, with its sharded parts read from this machine's
    `downloads/` copy, which the node's local rank 0 (`fetch`) downloads and verifies first.  Every rank learns
    whether every node has its copy; if one has not, all raise CheckpointError together."""
    import torch.distributed as dist

    if found is None or not SHARDED_NAME.match(found[0].rsplit("/", 1)[-1]):
        return found   # nothing to read, or a gathered checkpoint: rank 0 read it whole and sent it
    location, payload = found
    target = folder.files.out / "downloads" / location.rsplit("/", 1)[-1]
    problem = ""
    if fetch:
        try:
            read_checkpoint(fresh_download(location, target))   # every file checked against SHA256SUMS
        except CheckpointError as exc:
            problem = str(exc)
    problems: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)
    if any(problems):
        raise CheckpointError("a node could not copy the checkpoint to resume from: "
                              + "; ".join(p for p in problems if p))
    from trainer.sharded_state import ShardedRef
    return location, {k: ShardedRef(str(target), v.part, v.extra) if isinstance(v, ShardedRef) else v
                      for k, v in payload.items()}


class FollowerFolder(ReadsPerNode):
    """The run folder as every rank but 0 sees it: the same paths, no reading, writing or uploading.

    Rank 0 lists, reads and writes checkpoints, lineage and result.json; the others take part in
    gathering a checkpoint's state (its parts' state_dict calls are collectives) and receive what
    rank 0 reads (trainer/train.py broadcasts it).  Per node, every rank reads it from its machine's copy, which
    that machine's local rank 0 (a `NodeFolder`) downloads.
    """

    def __init__(self, train_dir: str, staging_root: str, per_node: bool = False) -> None:
        self.home = train_dir
        self.remote = is_uri(train_dir)
        self.per_node = per_node
        self.files = RunFiles(staging_folder(staging_root, train_dir) if self.remote else Path(train_dir))
        self.lineage_location = ""

    def checkpoints(self) -> list[str]:
        return []

    def latest_checkpoint(self) -> str | None:
        return None

    def announce_checkpoints(self, on_stored) -> None:
        return None

    def save_checkpoint(self, step: int, parts: dict[str, Any], meta: dict[str, Any]) -> None:
        # every rank writes its shards (sharded format) or takes part in gathering the whole state
        save_checkpoint(self.files.checkpoints, step, parts, meta, keep=None, per_node=self.per_node)

    def prepare_lineage(self, before_step: int) -> None:
        return None

    def write_result(self, result: dict[str, Any]) -> None:
        return None

    def location(self, relative: str) -> str:
        return join(self.home, *relative.split("/")) if self.remote else str(self.files.out / relative)

    def close(self, timeout_s: float) -> None:
        return None


class NodeFolder(FollowerFolder):
    """Per node, the local rank 0 of every machine but rank 0's: it uploads its machine's part of each sharded
    checkpoint (its files, then `SHA256SUMS.rank-<rank>`, their lines of SHA256SUMS) and deletes the part once the
    store holds it; a part left by an earlier start goes first.  Rank 0 lists the checkpoint (uploads SHA256SUMS)
    only once every node's part is stored.  On resume it downloads the checkpoint for its machine's ranks."""

    fetches = True

    def __init__(self, train_dir: str, staging_root: str) -> None:
        super().__init__(train_dir, staging_root, per_node=True)
        self.uploader = Uploader(name="node-upload")
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="node-upload-parts")
        self._parts: list[Future] = []
        for partial in self.files.checkpoints.glob("step-*.partial"):   # saves killed before they were complete
            shutil.rmtree(partial, ignore_errors=True)
        left = [p for p in listed_checkpoints(self.files.checkpoints) if p.is_dir()]
        for part in left:
            self._send(part)
        if left:
            log.warning("%d checkpoint part(s) an earlier run left in %s are being uploaded to %s", len(left),
                        self.files.checkpoints, self.home)

    def save_checkpoint(self, step: int, parts: dict[str, Any], meta: dict[str, Any]) -> None:
        save_checkpoint(self.files.checkpoints, step, parts, meta, keep=None, per_node=True,
                        on_visible=lambda path, digest: self._send(path))

    def _send(self, part: Path) -> None:
        self._parts.append(self._sender.submit(self._send_part, part, self.location(f"checkpoints/{part.name}")))

    def _send_part(self, part: Path, destination: str) -> bool:
        lines = sorted(part.glob(NODE_SUMS + "*"))
        files = [p for p in sorted(part.rglob("*")) if p.is_file() and p not in lines]
        uploads = [self.uploader.submit(p, join(destination, *p.relative_to(part).parts), keep_local=True)
                   for p in files]
        if not lines or not all([durable(u) for u in uploads]) or not durable(
                self.uploader.submit(lines[0], join(destination, lines[0].name), keep_local=True)):
            log.error("this node's part of checkpoint %s is not (wholly) in %s yet; it stays in %s and the next "
                      "start sends it", part.name, destination, part.parent)
            return False
        shutil.rmtree(part)
        return True

    def close(self, timeout_s: float) -> None:
        if timeout_s > 0:
            wait_for_saves()
        deadline = time.monotonic() + timeout_s
        for part in self._parts:
            try:
                part.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001  (a timeout: that part stays in staging)
                pass
        self.uploader.close(timeout_s=max(0.0, deadline - time.monotonic()))
        self._sender.shutdown(wait=True, cancel_futures=True)
        left = [p for d in listed_checkpoints(self.files.checkpoints) if d.is_dir() for p in d.rglob("*")]
        if left:
            log.error("%d file(s) of this node's checkpoint parts are not yet in %s and stay in %s; the next start "
                      "uploads them", len(left), self.home, self.files.checkpoints)
