"""weblm's trainer: megatron-core GPTModel trained on the indexed shards of SEAMS §4.

Reads only `<shards_dir>/manifest.json` and the shards it names (staged into `paths.cache_dir` when
they are on object storage: `input_cache.py`); writes MLflow runs, checkpoints, `result.json` and
`lineage/batches.jsonl` (SEAMS §5), through a local staging folder when train_dir is a URI
(`run_folder.py`; `node_folders.py` for the other ranks, `run_files.py` for where the files are).
Entry point: `python -m trainer.train`.
"""
import importlib.abc
import importlib.util
import sys


def _identity_compile(model=None, **_settings):
    """torch.compile's call shapes, `compile(fn)` and `compile(**settings)(fn)`, returning fn itself."""
    return model if model is not None else (lambda fn: fn)


class _MegatronWithoutCompile(importlib.abc.MetaPathFinder):
    """Imports megatron.core with torch.compile as the identity when this machine has no CUDA.

    megatron.core decorates its fused kernels with torch.compile (its `jit_fuser`) as it is imported, and the
    first decoration imports torch's dynamo and inductor: 3-4 s of every process that imports megatron (each
    torchrun rank, each Spark worker that writes shards).  Without CUDA those kernels never run: the cpu
    backend turns every fusion off (trainer/model.py).  With a GPU, megatron is imported untouched.
    Not a library's job: torch and megatron offer no switch for the decoration itself (read, megatron-core 0.16).
    """

    def find_spec(self, name, path=None, target=None):
        if name != "megatron.core":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            import torch

            # device_count(), not is_available(): it asks NVML, so a process that forks after this import (Spark's
            # worker daemon, jobs/worker_daemon.py) has not initialised CUDA, which forked children cannot use then
            if torch.cuda.device_count() > 0:
                return run_module(module)
            compile_ = torch.compile
            torch.compile = _identity_compile
            try:
                run_module(module)
            finally:
                torch.compile = compile_

        spec.loader.exec_module = exec_module
        return spec


if "megatron.core" not in sys.modules and not any(isinstance(f, _MegatronWithoutCompile) for f in sys.meta_path):
    sys.meta_path.insert(0, _MegatronWithoutCompile())
