"""Where a run's files go (SEAMS §5): `paths.train_dir` itself, or, when it is a URI, a local staging copy
that is uploaded in the background.

A local train_dir is written as it always was.  For `s3://…/train`, the trainer writes the same layout
under `<paths.train_staging>/<train_dir as a folder name>/`: a checkpoint is saved there (atomically) and,
once visible, handed to `storage.upload.Uploader`, which deletes the staged copy only once the store holds it,
so `checkpoints/` in staging holds exactly the checkpoints not yet durable.  A sharded checkpoint's folder goes
file by file, its SHA256SUMS last: the store lists it only once that object is there
(trainer/checkpoint.py's `stored_checkpoints`).  When the ranks span machines and staging is not one shared file
system (`remote.shared_staging: false`), each machine stages its own ranks' shards (trainer/run_files.py's
`node_staging`): its local rank 0 uploads them (trainer/node_folders.py's `NodeFolder`) and, last, the lines of
SHA256SUMS for them (`SHA256SUMS.rank-<rank>`); rank 0 uploads SHA256SUMS only once every other node's files are in
the store as those lines say, and on resume every node downloads the checkpoint it reads (`localize`).  The lineage
and result.json are working files in staging, snapshotted into `outbox/` (the train_dir layout) to be uploaded at each
checkpoint and at the end.  Training never waits for the store, except at the end (`close`), with a
timeout; whatever is left stays in staging, is counted and logged, and the next start sends it.
A checkpoint is announced (`announce_checkpoints`: the MLflow tag naming it and its sha256) only where readers will
find it: at once in a local train_dir, and in a remote one once the store holds all of it, an earlier start's
leftovers too; a checkpoint that never lands is never named.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import storage
from storage import is_uri, join
from storage.upload import Uploader, recover
from trainer.checkpoint import (CHECKPOINT_NAME, NODE_SUMS, SHARDED_NAME, SUMS, CheckpointError, checkpoint_step,
                                checksum_path, list_checkpoints, listed_checkpoints, remove_stored, save_checkpoint,
                                stored_checkpoints, wait_for_saves)
from trainer.lineage import parse_lines
from trainer.node_folders import ReadsPerNode, download_folder, drop_downloads, durable, fresh_download
from trainer.run_files import LINEAGE, RESULT, RunFiles, staging_folder

log = logging.getLogger("trainer.run_folder")


class RunFolder(ReadsPerNode):
    """A run's checkpoints, lineage and result: written in `files` (local), kept in `home` (train_dir)."""

    def __init__(self, train_dir: str, staging_root: str, keep_checkpoints: int, per_node: bool = False,
                 wait_s: float = 300.0) -> None:
        self.home = train_dir
        self.per_node = per_node   # the other machines stage and upload their own shards (`node_staging`)
        self.wait_s = wait_s   # per node: how long a resume waits for a staged checkpoint to be stored
        self.remote = is_uri(train_dir)
        self.keep = keep_checkpoints
        self.files = RunFiles(staging_folder(staging_root, train_dir) if self.remote else Path(train_dir))
        self.uploader: Uploader | None = None
        self._outbox_uploads: dict[str, Future] = {}
        self._published: dict[str, tuple[int, int]] = {}   # (size, mtime) of each file's last queued snapshot
        self._written: set[str] = set()   # working files this process writes (and so sends at the end)
        self._prune_lock = threading.Lock()
        self._folder_uploads: dict[str, Future] = {}   # sharded checkpoints on their way (by name), one at a time
        self._closing = threading.Event()   # set when `close` stops waiting for other nodes' shards
        self._on_stored: Callable[[int, str, str], None] | None = None
        self._unannounced: list[tuple[int, str, str]] = []   # stored before anyone asked to hear of it
        self._announce_lock = threading.Lock()
        self._landing: dict[str, list] = {}   # a gathered checkpoint on its way: destination -> [sha256, files to land]
        self.last_sha256 = ""
        if self.remote:
            self.uploader = Uploader(on_durable=self._on_durable, name="train-upload")
            self._folder_sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="train-upload-folders")
            self._recover()

    # -- where things are ------------------------------------------------------------------------------------
    @property
    def outbox(self) -> Path:
        return self.files.out / "outbox"

    def location(self, relative: str) -> str:
        """Where a file of the run lives for people and result.json: under train_dir (a path or a URI)."""
        return join(self.home, *relative.split("/")) if self.remote else str(self.files.out / relative)

    @property
    def lineage_location(self) -> str:
        return self.location(LINEAGE)

    # -- checkpoints -----------------------------------------------------------------------------------------
    def checkpoints(self) -> list[str]:
        """Every checkpoint of the run, oldest first: local paths, or URIs (in the store or still staged)."""
        if not self.remote:
            return [str(p) for p in list_checkpoints(self.files.checkpoints)]
        names = {p.name for p in list_checkpoints(self.files.checkpoints)} | set(self._stored_checkpoints())
        return [self.location(f"checkpoints/{name}") for name in sorted(names)]

    def latest_checkpoint(self) -> str | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def announce_checkpoints(self, on_stored: Callable[[int, str, str], None]) -> None:
        """Call `on_stored(step, location, sha256)` for each checkpoint once readers find it where `checkpoints()`
        says: at once in a local train_dir, once the store holds all of it in a remote one.  Those stored before
        this call (an earlier start's leftovers, sent as this one began) are announced now."""
        with self._announce_lock:
            self._on_stored, waiting, self._unannounced = on_stored, self._unannounced, []
        for args in waiting:
            self._tell(on_stored, *args)

    def _announce(self, name: str, location: str, digest: str) -> None:
        step = checkpoint_step(Path(name))
        with self._announce_lock:
            on_stored = self._on_stored
            if on_stored is None:
                self._unannounced.append((step, location, digest))
                return
        self._tell(on_stored, step, location, digest)

    @staticmethod
    def _tell(on_stored: Callable[[int, str, str], None], step: int, location: str, digest: str) -> None:
        try:
            on_stored(step, location, digest)
        except Exception as exc:  # noqa: BLE001  (a tag that fails loses no checkpoint)
            log.warning("checkpoint %s is stored, but announcing it failed (%s: %s)", location,
                        type(exc).__name__, exc)

    def save_checkpoint(self, step: int, parts: dict[str, Any], meta: dict[str, Any]) -> str:
        """Write checkpoint `step`; its location is returned.  Once it is visible (at once, or when an asynchronous
        save lands), its sha256 is kept in `last_sha256`, and it is announced (a local train_dir) or queued for
        upload (a remote one: announced once stored)."""
        def visible(path: Path, digest: str) -> None:
            self.last_sha256 = digest
            if self.remote:
                self._send(path, digest)
            else:
                self._announce(path.name, str(path), digest)

        if not self.remote:
            return str(save_checkpoint(self.files.checkpoints, step, parts, meta, self.keep, on_visible=visible))
        # Staged copies leave only by upload; the store keeps the newest `keep` (pruned as uploads land).
        path = save_checkpoint(self.files.checkpoints, step, parts, meta, keep=None, on_visible=visible,
                               per_node=self.per_node)
        self.publish(LINEAGE, wait_s=None)
        return self.location(f"checkpoints/{path.name}")

    def _send(self, path: Path, digest: str | None) -> None:
        """Queue a visible staged checkpoint for upload: a file with its sidecar, or a sharded folder."""
        destination = self.location(f"checkpoints/{path.name}")
        if path.is_dir():
            self._folder_uploads[path.name] = self._folder_sender.submit(self._send_folder, path, destination, digest)
        else:
            self._expect(destination, path, digest)
            self.uploader.submit(checksum_path(path), destination + ".sha256")
            self.uploader.submit(path, destination)

    def _expect(self, destination: str, path: Path, digest: str | None) -> None:
        """Remember a gathered checkpoint's sha256 (given, or its sidecar's) to announce it once it and its sidecar
        have landed."""
        digest = digest or _sidecar_digest(path)
        if digest:
            with self._announce_lock:
                self._landing[destination] = [digest, 2]

    def _send_folder(self, path: Path, destination: str, digest: str | None) -> bool:
        """Upload a sharded checkpoint: its files and sidecar, then (all durable) its SHA256SUMS, which makes it a
        checkpoint in the store; only then is the staged folder deleted.  A file that fails every retry leaves the
        folder staged (and unlisted in the store) for the next start."""
        sidecar = checksum_path(path)
        digest = digest or _sidecar_digest(path)
        files = [p for p in sorted(path.rglob("*")) if p.is_file() and p.name != SUMS]
        uploads = [self.uploader.submit(p, join(destination, *p.relative_to(path).parts), keep_local=True)
                   for p in files] + [self.uploader.submit(sidecar, destination + ".sha256", keep_local=True)]
        if not all([durable(u) for u in uploads]) or not self._other_nodes_stored(path, destination) or not durable(
                self.uploader.submit(path / SUMS, join(destination, SUMS), keep_local=True)):
            log.error("checkpoint %s is not (wholly) in %s yet; it stays in staging and the next start sends it",
                      path.name, destination)
            return False
        shutil.rmtree(path)
        sidecar.unlink(missing_ok=True)
        if digest:
            self._announce(path.name, destination, digest)
        self._prune_store()
        return True

    def _other_nodes_stored(self, path: Path, destination: str) -> bool:
        """Per node: wait until the store holds every file of SHA256SUMS that this machine lacks, as the other nodes'
        `SHA256SUMS.rank-*` (uploaded after their files) list them; False once `close` stops waiting."""
        if not self.per_node:
            return True
        wanted = {}
        for line in (path / SUMS).read_text().splitlines():
            digest, name = line.split("  ", 1)
            if not (path / name).is_file():
                wanted[name] = digest
        delay, began = 0.2, time.monotonic()
        while wanted:
            try:
                for entry in storage.listdir(destination):
                    if entry.rsplit("/", 1)[-1].startswith(NODE_SUMS):
                        for line in storage.read_text(entry).splitlines():
                            digest, name = line.split("  ", 1)
                            if wanted.get(name) == digest:
                                del wanted[name]
            except Exception as exc:  # noqa: BLE001  (any client error: look again)
                log.warning("could not list %s (%s: %s); looking again", destination, type(exc).__name__, exc)
            if wanted and self._closing.wait(delay):
                log.error("checkpoint %s: %d file(s) of other nodes are not in %s yet (%s...)", path.name,
                          len(wanted), destination, ", ".join(sorted(wanted)[:3]))
                return False
            delay = min(delay * 2, 5.0)
        if time.monotonic() - began > 1:
            log.info("checkpoint %s: the other nodes' files were stored after %.1f s", path.name,
                     time.monotonic() - began)
        return True

    def local_copy(self, checkpoint: str) -> tuple[Path, bool]:
        """A local file holding `checkpoint`, and whether it is a copy made for reading it (delete it after).  A
        sharded checkpoint's folder is not "made for reading": its shards are read when it is restored, later,
        so it stays in `downloads/` until the next download replaces it."""
        if not self.remote:
            return Path(checkpoint), False
        name = checkpoint.rsplit("/", 1)[-1]
        target = self.files.out / "downloads" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if SHARDED_NAME.match(name):
            if self.per_node:   # the staged folder holds this machine's files only: read it from the store
                self._wait_for_folder(name)
                return fresh_download(checkpoint, target), False
            return self._folder_copy(checkpoint, target), False
        target.unlink(missing_ok=True)
        self._fetch_checksum(checkpoint, checksum_path(target))
        staged = self.files.checkpoints / name
        try:   # a hard link (else a copy): the uploader deletes the staged file as soon as the store holds it
            _link_or_copy(staged, target)
            return target, True
        except FileNotFoundError:   # not staged (any more): it is in the store
            pass
        began = time.perf_counter()
        try:
            storage.get_file(checkpoint, target)
        except Exception as exc:  # noqa: BLE001  (any client error: say which object and what to check)
            raise CheckpointError(f"cannot download {checkpoint} ({type(exc).__name__}: {exc}); check that the "
                                  "store is reachable (conf/storage.yaml) and resume again") from exc
        log.info("downloaded %s (%.1f MiB) in %.1f s", checkpoint, target.stat().st_size / 2**20,
                 time.perf_counter() - began)
        return target, True

    def _wait_for_folder(self, name: str) -> None:
        """Per node: a staged checkpoint (this start sends an earlier one's leftovers) is read once it is stored."""
        upload = self._folder_uploads.get(name)
        if upload is not None and not upload.done():
            log.info("checkpoint %s: waiting for it to be stored before reading it", name)
            try:
                upload.result(timeout=self.wait_s)
            except Exception:  # noqa: BLE001  (not stored in time: reading it fails, the one before it is tried)
                pass

    def _folder_copy(self, checkpoint: str, target: Path) -> Path:
        drop_downloads(target.parent)
        staged = self.files.checkpoints / target.name
        try:   # hard links (else copies) of the staged folder: the upload deletes it once the store holds it
            shutil.copytree(staged, target, copy_function=_link_or_copy)
            shutil.copyfile(checksum_path(staged), checksum_path(target))
            if (target / SUMS).is_file():
                return target
        except (FileNotFoundError, shutil.Error):   # not staged (any more): it is in the store
            pass
        shutil.rmtree(target, ignore_errors=True)
        return download_folder(checkpoint, target)

    def _fetch_checksum(self, checkpoint: str, target: Path) -> None:
        """The checkpoint's sha256 sidecar beside its local copy, from staging or the store, if it has one."""
        target.unlink(missing_ok=True)
        staged = checksum_path(self.files.checkpoints / checkpoint.rsplit("/", 1)[-1])
        try:
            if staged.exists():
                shutil.copyfile(staged, target)
            elif storage.exists(checkpoint + ".sha256"):
                storage.get_file(checkpoint + ".sha256", target)
        except Exception as exc:  # noqa: BLE001  (without it the checkpoint is still read; torch.load checks its structure)
            log.warning("could not read the checksum of %s (%s: %s)", checkpoint, type(exc).__name__, exc)

    def _stored_checkpoints(self) -> list[str]:
        folder = join(self.home, "checkpoints")
        try:
            return stored_checkpoints(folder)
        except Exception as exc:  # noqa: BLE001  (any client error: the run cannot know its checkpoints)
            raise CheckpointError(f"cannot list {folder} ({type(exc).__name__}: {exc}); the trainer must know the "
                                  "run's checkpoints before it starts: check that the store is reachable "
                                  "(conf/storage.yaml) and start again") from exc

    def _on_durable(self, local: str, destination: str) -> None:
        """A gathered checkpoint landed: announce it and prune (a sharded one does both once its SHA256SUMS lands)."""
        checkpoint = destination.removesuffix(".sha256")
        name = checkpoint.rsplit("/", 1)[-1]
        if not (checkpoint.startswith(join(self.home, "checkpoints") + "/") and CHECKPOINT_NAME.match(name)):
            return
        with self._announce_lock:
            landing = self._landing.get(checkpoint)
            if landing is not None:
                landing[1] -= 1
                if landing[1] > 0:
                    landing = None   # the other file is still on its way
                else:
                    del self._landing[checkpoint]
        if landing is not None:
            self._announce(name, checkpoint, landing[0])
        if checkpoint == destination:
            self._prune_store()

    def _prune_store(self) -> None:
        """Drop stored checkpoints beyond the newest `keep` of stored and staged ones together."""
        with self._prune_lock:
            try:
                stored = self._stored_checkpoints()
                staged = {p.name for p in listed_checkpoints(self.files.checkpoints)}
                keep = set(sorted(set(stored) | staged, key=lambda n: (n[:13], n))[-self.keep:])
                for name in stored:
                    if name not in keep:
                        remove_stored(join(self.home, "checkpoints"), name)
            except Exception as exc:  # noqa: BLE001  (pruning is housekeeping: the next upload prunes again)
                log.warning("could not prune old checkpoints under %s (%s: %s); the next upload tries again",
                            self.home, type(exc).__name__, exc)

    # -- lineage and result ----------------------------------------------------------------------------------
    def prepare_lineage(self, before_step: int) -> Path:
        """The local lineage file a (resumed) run appends to, holding every step below `before_step`."""
        path = self.files.lineage
        self._written.add(LINEAGE)
        if not self.remote or before_step == 0 or _steps_below(path, before_step) == before_step:
            return path
        stored = self.location(LINEAGE)
        try:
            if storage.exists(stored):
                storage.get_file(stored, path)
                log.info("lineage of steps below %d taken from %s", before_step, stored)
        except Exception as exc:  # noqa: BLE001  (lineage is a record, not training state: warn and go on)
            log.warning("could not read %s (%s: %s)", stored, type(exc).__name__, exc)
        if _steps_below(path, before_step) != before_step:
            log.warning("the lineage in %s and %s lacks some of the %d steps before this resume; provenance of "
                        "later checkpoints will say which", path, stored, before_step)
        return path

    def write_result(self, result: dict[str, Any]) -> None:
        storage.write_text(str(self.files.result), json.dumps(result, indent=2) + "\n")
        self._written.add(RESULT)
        self.publish(RESULT, wait_s=None)

    def publish(self, relative: str, wait_s: float | None) -> bool:
        """Snapshot a working file into the outbox and queue its upload (remote runs only); True once queued.

        One upload per file at a time, so an older snapshot never lands after a newer one: while the last
        one is in flight this defers (False), unless `wait_s` allows waiting for it; `close` sends what was
        deferred.
        """
        working = self.files.out / relative
        if not self.remote or not working.is_file():
            return True
        previous = self._outbox_uploads.get(relative)
        if previous is not None and not previous.done():
            try:
                if wait_s is None:
                    raise TimeoutError
                previous.exception(timeout=wait_s)
            except TimeoutError:   # still in flight: `close`, or the next start, sends the newest copy
                return False
        stat = working.stat()
        snapshot = self.outbox / relative
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        tmp = snapshot.with_name(f".{snapshot.name}.tmp")
        shutil.copyfile(working, tmp)
        os.replace(tmp, snapshot)
        self._published[relative] = (stat.st_size, stat.st_mtime_ns)
        self._outbox_uploads[relative] = self.uploader.submit(snapshot, self.location(relative))
        return True

    def _stale(self, relative: str) -> bool:
        working = self.files.out / relative
        if not working.is_file():
            return False
        stat = working.stat()
        return self._published.get(relative) != (stat.st_size, stat.st_mtime_ns)

    # -- start and end ---------------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Send what an earlier process left in staging: checkpoints, and the newest lineage/result."""
        for path in self.files.checkpoints.glob("*.pt"):   # announced as they land, as this run's own are
            self._expect(self.location(f"checkpoints/{path.name}"), path, None)
        sent = recover(self.uploader, self.files.checkpoints, join(self.home, "checkpoints"), (".pt", ".pt.sha256"))
        for folder in listed_checkpoints(self.files.checkpoints):   # visible sharded folders not yet sent
            if folder.is_dir():
                self._send(folder, None)
                sent += sum(1 for p in folder.rglob("*") if p.is_file()) + 1
        for relative in (LINEAGE, RESULT):
            if not (self.outbox / relative).is_file():
                continue
            if (self.files.out / relative).is_file():   # the working copy is at least as new as its snapshot
                self.publish(relative, wait_s=None)
            else:
                self._outbox_uploads[relative] = self.uploader.submit(self.outbox / relative, self.location(relative))
            sent += 1
        if sent:
            log.warning("%d file(s) an earlier run left in %s are being uploaded to %s", sent, self.files.out,
                        self.home)

    def close(self, timeout_s: float) -> int:
        """Send the newest lineage/result, wait (up to `timeout_s`) for every upload, stop the uploader.

        Returns how many files stay in staging for the next start (0 for a local train_dir).
        """
        if not self.remote:
            return 0
        if timeout_s > 0:
            wait_for_saves()   # an asynchronous save still in flight (a --stop-after) becomes visible and is sent
        deadline = time.monotonic() + timeout_s
        remaining = lambda: max(0.0, deadline - time.monotonic())   # noqa: E731
        for relative in sorted(self._written):
            if self._stale(relative):
                self.publish(relative, wait_s=remaining())
        for upload in list(self._folder_uploads.values()):   # each sends SHA256SUMS once its other files are stored
            try:
                upload.result(timeout=remaining())
            except Exception:  # noqa: BLE001  (a timeout: that folder stays in staging)
                pass
        self._closing.set()
        pending = self.uploader.pending()
        if pending:
            log.info("waiting up to %.0f s for %d upload(s) to %s", remaining(), pending, self.home)
        self.uploader.close(timeout_s=remaining())
        self._folder_sender.shutdown(wait=True, cancel_futures=True)
        left = self.left_in_staging()
        counts = self.uploader.counts
        if left:
            log.error("%d file(s) not yet in %s stay in %s (%d upload attempts failed): %s; the next start with "
                      "the same train_dir (python -m trainer.train --resume) uploads them", len(left), self.home,
                      self.files.out, counts["attempts_failed"], ", ".join(left))
        else:
            log.info("every file of the run is in %s (%d uploaded, %.1f MiB; %d failed attempts retried)",
                     self.home, counts["files_uploaded"], counts["bytes_uploaded"] / 2**20,
                     counts["attempts_failed"])
        return len(left)

    def left_in_staging(self) -> list[str]:
        """Staged files the store does not hold yet, relative to the staging folder."""
        found = (list(self.files.checkpoints.glob("step-*.pt")) + list(self.files.checkpoints.glob("step-*.sha256"))
                 + [f for d in self.files.checkpoints.glob("step-*") if SHARDED_NAME.match(d.name) for f in d.rglob("*")]
                 + list(self.outbox.rglob("*")))
        return sorted(str(p.relative_to(self.files.out)) for p in found   # not an outbox snapshot being made
                      if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp")))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except FileNotFoundError:
        raise
    except OSError:   # no hard links on this file system
        shutil.copyfile(src, dst)


def _steps_below(lineage: Path, before_step: int) -> int:
    if not lineage.is_file():
        return 0
    with open(lineage) as handle:
        return len({r["step"] for r in parse_lines(handle, str(lineage)) if r["step"] < before_step})


def _sidecar_digest(path: Path) -> str | None:
    """The sha256 a checkpoint's sidecar holds (`<sha256>  <name>`), or None without one."""
    try:
        return checksum_path(path).read_text().split()[0]
    except (FileNotFoundError, IndexError):
        return None
