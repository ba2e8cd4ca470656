"""The Python workers of the jobs' Spark sessions fork from `jobs.worker_daemon`, with megatron-core (and torch)
already imported, and work after the fork: numpy's and torch's own threads come back in the child."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from jobs import worker_daemon
from jobs.config import load_jobs_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_jobs_sessions_run_their_workers_from_the_preloading_daemon():
    conf = load_jobs_config([]).spark.conf
    assert conf["spark.python.daemon.module"] == "jobs.worker_daemon"


def test_a_forked_worker_inherits_megatron_and_computes(spark):
    def worker_state(_):
        """In a Python worker (a local function, so pickled by value): what it inherited from its parent, and
        that numpy and torch compute in it."""
        import numpy as np

        preloaded = {name: name in sys.modules for name in worker_daemon.PRELOADED}
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            parent = handle.read().replace(b"\0", b" ").decode()
        import torch

        product = float((np.ones((300, 300)) @ np.ones((300, 300))).sum())
        torch_product = float((torch.ones(300, 300) @ torch.ones(300, 300)).sum())
        yield preloaded, parent, product, torch_product

    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "jobs.worker_daemon"
    rows = spark.sparkContext.parallelize(range(2), 2).mapPartitions(worker_state).collect()
    assert len(rows) == 2
    for preloaded, parent, product, torch_product in rows:
        assert all(preloaded.values()), preloaded
        assert "jobs.worker_daemon" in parent
        assert product == torch_product == 300.0 ** 3


def test_a_module_that_cannot_be_imported_is_named_and_the_daemon_goes_on(monkeypatch, capsys):
    monkeypatch.setattr(worker_daemon, "PRELOADED", ("trainer", "weblm_no_such_module"))
    assert worker_daemon.preload() == ["weblm_no_such_module"]
    assert "weblm_no_such_module not preloaded" in capsys.readouterr().err


def test_on_a_gpu_machine_the_daemon_forks_without_having_initialised_cuda():
    """CUDA cannot be used in a child forked after the parent initialised it (torch's "poison fork"); asking CUDA's
    runtime how many devices there are initialises it.  On a machine whose NVML sees a GPU (simulated: NVML's count
    is 1 here), the preload asks NVML only, and megatron is imported as it is on a GPU (its kernels compiled)."""
    script = textwrap.dedent("""
        import torch

        asked = []
        count = torch._C._cuda_getDeviceCount
        torch._C._cuda_getDeviceCount = lambda: asked.append(1) or count()
        torch.cuda._device_count_nvml = lambda: 1
        compiled = []
        compile_ = torch.compile
        torch.compile = lambda *a, **k: compiled.append(1) or compile_(*a, **k)
        from jobs import worker_daemon

        assert worker_daemon.preload() == []
        print(len(asked), len(compiled) > 0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0", "True"]
