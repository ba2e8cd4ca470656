"""One pipeline run at a time on a lake (jobs/lease.py): a second run is refused with the name of the run that
holds the lake and leaves the run state alone; a lease whose run died is taken over (at once when its process on
this host is gone, else once it expired); a held lease is renewed, and a run that lost it stops; on a bucket too."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import storage
from jobs.lease import LakeBusy, Lease, LeaseSettings
from jobs.pipeline import main

ROOT = Path(__file__).resolve().parents[2]

QUICK = LeaseSettings(ttl_s=60, heartbeat_s=0.2, settle_s=0.05)


@pytest.fixture
def live_pid():
    """A process that is alive for the test: the pid of another run that still works."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def write_lease(path: str, run_id: str, pid: int, renewed: float, host: str | None = None) -> None:
    storage.write_text(path, json.dumps({"run_id": run_id, "host": host or socket.gethostname(), "pid": pid,
                                         "started": "2026-12-03T03:00:00Z", "renewed": renewed, "ttl_s": 60}))


def test_a_second_run_is_refused_naming_the_run_that_holds_the_lake(tmp_path, live_pid, capsys):
    """The refusal comes before the run state is read or written, and before Spark starts."""
    state_dir = tmp_path / "lake" / "_pipeline"
    state_dir.mkdir(parents=True)
    write_lease(str(state_dir / "lease.json"), "20261203T030000Z-cafe0001", live_pid, time.time())
    (state_dir / "state.json").write_text("{\"the other run's\": 1}")
    assert main(["-o", f"paths.var={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert f"another run holds this lake: run 20261203T030000Z-cafe0001 on {socket.gethostname()} " \
           f"(pid {live_pid})" in err
    assert "expire (180 s after its last renewal)" in err
    assert (state_dir / "state.json").read_text() == "{\"the other run's\": 1}"
    assert json.loads((state_dir / "lease.json").read_text())["run_id"] == "20261203T030000Z-cafe0001"


def test_a_stage_run_by_hand_is_refused_while_a_run_holds_the_lake(tmp_path, live_pid):
    """`python -m jobs.extract` beside a scheduled pipeline run: one line, exit code 2, nothing written."""
    state_dir = tmp_path / "lake" / "_pipeline"
    state_dir.mkdir(parents=True)
    write_lease(str(state_dir / "lease.json"), "20261203T030000Z-cafe0002", live_pid, time.time())
    done = subprocess.run([sys.executable, "-m", "jobs.extract", "-o", f"paths.var={tmp_path}"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.startswith("jobs.extract: another run holds this lake: run 20261203T030000Z-cafe0002")
    assert sorted(p.name for p in (tmp_path / "lake").rglob("*")) == ["_pipeline", "lease.json"]


def test_a_lease_whose_run_died_is_taken_over(tmp_path, live_pid, caplog):
    path = str(tmp_path / "lease.json")
    # its process on this host is gone (a pid no process has: above the kernel's pid_max)
    write_lease(path, "dead-here", 2 ** 22 + 1, time.time())
    lease = Lease(path, "new-1", QUICK)
    lease.acquire()
    assert json.loads(storage.read_text(path))["run_id"] == "new-1"
    assert "its process 4194305 on this host is gone" in caplog.text
    lease.release()
    assert not storage.exists(path)
    # on another host, alive as far as this host can tell: held until it expires
    write_lease(path, "elsewhere", live_pid, time.time(), host="node-7")
    with pytest.raises(LakeBusy, match="run elsewhere on node-7"):
        Lease(path, "new-2", QUICK).acquire()
    write_lease(path, "elsewhere", live_pid, time.time() - 61, host="node-7")
    lease = Lease(path, "new-3", QUICK)
    lease.acquire()
    assert "not renewed for 61 s" in caplog.text
    lease.release()


def test_a_held_lease_is_renewed_and_a_run_that_lost_it_stops(tmp_path):
    path = str(tmp_path / "lease.json")
    lease = Lease(path, "mine", QUICK)
    lease.acquire()
    first = json.loads(storage.read_text(path))["renewed"]
    time.sleep(0.7)
    assert json.loads(storage.read_text(path))["renewed"] > first
    lease.check()   # still ours
    write_lease(path, "usurper", 1, time.time())   # took it over, thinking this run dead
    time.sleep(0.7)
    with pytest.raises(LakeBusy, match="this run lost the lake to run usurper"):
        lease.check()
    lease.release()
    assert json.loads(storage.read_text(path))["run_id"] == "usurper"   # not ours to remove


def test_of_two_runs_that_write_the_lease_together_one_goes_on(tmp_path):
    """Write, then read back after the settle time: the later writer wins, the earlier stops."""
    path = str(tmp_path / "lease.json")
    slow = Lease(path, "first", LeaseSettings(ttl_s=60, heartbeat_s=10, settle_s=0.5))
    errors = []

    def take():
        try:
            slow.acquire()
        except LakeBusy as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=take)
    thread.start()
    time.sleep(0.1)   # "first" wrote its lease and waits to read it back
    storage.write_text(path, json.dumps({"run_id": "second", "host": "node-2", "pid": 1, "started": "",
                                         "renewed": time.time(), "ttl_s": 60}))
    thread.join()
    assert errors and "another run took this lake at the same moment: run second on node-2" in errors[0]
    slow.release()
    assert json.loads(storage.read_text(path))["run_id"] == "second"


def test_the_lease_lives_on_a_bucket_too(s3, live_pid):
    path = f"{s3}/lake/_pipeline/lease.json"
    lease = Lease(path, "on-s3", QUICK)
    lease.acquire()
    with pytest.raises(LakeBusy, match="run on-s3"):
        Lease(path, "other", QUICK).acquire()
    lease.release()
    assert not storage.exists(path)
