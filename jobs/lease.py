"""One pipeline run at a time on a lake: a lease file beside the run state (`<lake>/<state_dir>/lease.json`).

Two runs on one lake (a scheduled run and one started by hand, two people's runs) would write the same tables
and the same run state at once: on S3, Delta's default log store does not make the commits of two drivers safe,
and the export stages of both write into one staging folder (measured: the later run's export failed when the
other removed it).  The scheduler templates allow one run at a time; the lease stops the others, wherever they
start, with a message naming the run that holds the lake.

The lease names its run (id, host, pid, start) and a thread renews it every `heartbeat_s`.  A lease not renewed
for `ttl_s` belongs to a run that died, and the next run takes it over; at once when that run was on this host
and its process is gone.  fsspec offers no create-if-absent on every store, so taking the lease is write, then
read back after `settle_s`: the run goes on only if the lease is still its own (of two runs that write it within
that window, the later one wins and the other stops).  The pipeline, which every scheduler template runs, takes
the lease, and so does each stage's own command (`python -m jobs.extract`, `SparkJob.main`); the report only reads.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import storage

log = logging.getLogger("weblm.jobs.pipeline")


@dataclass(frozen=True)
class LeaseSettings:
    ttl_s: float
    heartbeat_s: float
    settle_s: float


LEASE_FILE = "lease.json"   # beside the pipeline's state.json, in <lake>/<state_dir>/


def lake_lease(lake: str, run_id: str, cfg=None) -> "Lease":
    """The lease on `lake` as the pipeline's settings place and time it (`state_dir`, `lease`): `cfg`, a
    `PipelineConfig` with the command line's overrides, else conf/pipeline.yaml's."""
    if cfg is None:
        from jobs.pipeline import load_pipeline_config   # jobs.pipeline imports this module

        cfg = load_pipeline_config()
    return Lease(storage.join(lake, cfg.state_dir, LEASE_FILE), run_id, cfg.lease)


class LakeBusy(RuntimeError):
    """Another run holds the lake, or took it over from this one."""


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(lease: dict) -> str:
    return (f"run {lease.get('run_id')} on {lease.get('host')} (pid {lease.get('pid')}), "
            f"started {lease.get('started')}, last renewed {_utc(float(lease.get('renewed', 0)))}")


def _process_gone(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, TypeError, ValueError, OverflowError):
        return False   # someone else's live process, or no pid to judge by
    return False


class Lease:
    def __init__(self, path: str, run_id: str, settings: LeaseSettings) -> None:
        self.path, self.run_id, self.settings = path, run_id, settings
        self.holder = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "started": _utc(time.time())}
        self.lost_to: dict | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> dict | None:
        if not storage.exists(self.path):
            return None
        try:
            lease = json.loads(storage.read_text(self.path))
        except (ValueError, UnicodeDecodeError):
            log.warning("lease %s is not JSON: taken as no lease", self.path)
            return None
        return lease if isinstance(lease, dict) else None

    def _write(self) -> None:
        storage.write_text(self.path, json.dumps({**self.holder, "renewed": time.time(),
                                                  "ttl_s": self.settings.ttl_s}, indent=2) + "\n")

    def stale_reason(self, lease: dict) -> str | None:
        """Why another run's lease no longer holds (it expired, or its process on this host is gone); None while
        it holds."""
        age = time.time() - float(lease.get("renewed", 0))
        if age > float(lease.get("ttl_s", self.settings.ttl_s)):
            return f"not renewed for {age:.0f} s"
        if lease.get("host") == self.holder["host"] and _process_gone(lease.get("pid")):
            return f"its process {lease.get('pid')} on this host is gone"
        return None

    def acquire(self) -> None:
        current = self.read()
        if current and current.get("run_id") != self.run_id:
            reason = self.stale_reason(current)
            if reason is None:
                raise LakeBusy(f"another run holds this lake: {describe(current)}; one run at a time writes "
                               f"a lake. Wait for it to end, or, if it was killed, for its lease {self.path} to expire "
                               f"({self.settings.ttl_s:.0f} s after its last renewal)")
            log.warning("taking over the lake from %s: %s", describe(current), reason)
        self._write()
        time.sleep(self.settings.settle_s)
        current = self.read()
        if not current or current.get("run_id") != self.run_id:
            raise LakeBusy("another run took this lake at the same moment: "
                           + (describe(current) if current else f"its lease {self.path} is gone"))
        self._thread = threading.Thread(target=self._renew, name="lake-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_s):
            try:
                current = self.read()
                if current and current.get("run_id") != self.run_id:
                    self.lost_to = current
                    log.error("run %s lost the lake to %s", self.run_id, describe(current))
                    return
                self._write()
            except Exception as exc:  # noqa: BLE001  (a store that failed once: the next renewal tries again)
                log.warning("could not renew the lease %s: %s: %s", self.path, type(exc).__name__, exc)

    def check(self) -> None:
        """Between stages: stop when another run took the lake over (this run was thought dead)."""
        if self.lost_to is not None:
            raise LakeBusy(f"this run lost the lake to {describe(self.lost_to)}, which took it over when this run's "
                           "lease was not renewed in time; stopping before the next stage")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            current = self.read()
            if current and current.get("run_id") == self.run_id:
                storage.remove(self.path)
        except Exception as exc:  # noqa: BLE001  (it expires on its own)
            log.warning("could not remove the lease %s (%s: %s); it expires %.0f s after its last renewal",
                        self.path, type(exc).__name__, exc, self.settings.ttl_s)
