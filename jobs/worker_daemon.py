"""PySpark's own worker daemon (`pyspark.daemon`), with the shard writer's imports done once before it forks.

Spark starts one daemon per executor and forks a Python worker from it for each task slot, and again for each
worker it stopped after a minute idle.  Every worker that writes or checks shards imports megatron-core, which
imports torch: about 5 s of CPU a worker.  Imported here, a fork inherits them for nothing, as torch's own
DataLoader workers do.  Set by `spark.python.daemon.module` in conf/jobs.yaml; Spark runs it as `python -m`.

pandas and pyarrow are not imported here: they start threads as they are imported, and a fork copies no thread
(pyspark's daemon imports its worker after the fork for that reason).  torch and numpy start none that a forked
worker needs (checked: tests/jobs/test_worker_daemon.py), and on a GPU executor the preload leaves CUDA
uninitialised (trainer/__init__.py asks NVML how many GPUs there are), so a forked worker can still use it.
Where megatron-core is not installed (an executor image without the trainer's packages), the daemon runs as
pyspark's own and the shard writer says what is missing.
"""
from __future__ import annotations

import sys

PRELOADED = ("trainer", "megatron.core.datasets.indexed_dataset")


def preload() -> list[str]:
    """Import PRELOADED; the names that could not be imported (the daemon runs without them)."""
    import importlib

    missing = []
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError as error:
            missing.append(name)
            print(f"weblm worker daemon: {name} not preloaded ({error}); each worker imports it itself",
                  file=sys.stderr)
    return missing


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
