"""bench/gpu_mfu.py dry-runs on the CPU at a tiny size, so that time on a GPU goes to measuring."""
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_benchmark_dry_run_measures_every_kind_of_variant(manifest_path, tmp_path):
    out = tmp_path / "results.jsonl"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench/gpu_mfu.py"), "--dry-run", "--manifest", str(manifest_path),
         "--only", "mcore-1b,torch-1b,resume,mcore-1b-as-shipped", "--warmup", "1", "--steps", "2",
         "--profile", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = {r["name"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"mcore-1b", "torch-1b", "resume", "mcore-1b-as-shipped"}
    assert not [r for r in records.values() if "error" in r], records
    for name in ("mcore-1b", "torch-1b", "mcore-1b-as-shipped"):
        r = records[name]
        assert r["tokens_per_s"] > 0 and r["mfu"] is None          # no GPU peak on a CPU
        assert len(r["losses"]) == 3 and all(math.isfinite(x) for x in r["losses"])
        assert r["fwd_bwd_s"] > 0 and r["optimizer_s"] > 0 and r["data_wait_s"] >= 0
        # the profiled step comes after the timed ones: its table, by kind of operator, with the matrix products
        profile = r["profile"]
        assert profile["steps"] == 1 and profile["busy_ms"] > 0 and profile["by_kind"]["gemm"] > 0
        assert abs(sum(profile["by_kind"].values()) - profile["busy_ms"]) < 1e-6 and profile["top"]
    # the same model, data and seed: the megatron variants start from the same loss
    assert abs(records["mcore-1b"]["losses"][0] - records["mcore-1b-as-shipped"]["losses"][0]) < 1e-4
    assert records["resume"]["max_loss_diff"] == 0.0
    assert records["resume"]["straight"] == records["resume"]["resumed"]
    assert records["resume"]["checkpoint_format"] == "sharded"   # on a GPU: the cuda engine's sharded parts
    assert "variant" in run.stdout and "device: none (CPU dry run)" in run.stdout
    assert "mcore-1b: profile of 1 step(s)" in run.stdout and "torch-1b: profile of 1 step(s)" in run.stdout
