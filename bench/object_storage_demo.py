"""Benchmark: the whole demo with every durable path on s3:// against the same demo on local disk.

    .venv/bin/python bench/object_storage_demo.py [PROFILE]

PROFILE defaults to conf/profiles/smoke.yaml (a small web; use "" for the full demo).  The S3 side is a
real S3 API server (moto's server mode on 127.0.0.1, the tests' harness), so the ratio measures the cost
of the object-storage code paths (uploads, s3a, staging, verification), not of a network.  Prints each
stage's seconds for both runs and the ratio s3 / local.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.s3server import CREDENTIALS, S3Server, make_bucket, storage_overlay  # noqa: E402


def demo(overlays: list[str], summary_file: Path) -> dict:
    env = dict(os.environ, WEBLM_CONF_OVERLAY=",".join(overlays), SPARK_LOCAL_IP="127.0.0.1", **CREDENTIALS)
    proc = subprocess.run([sys.executable, "-m", "demo"], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(summary_file.read_text())["seconds"]


def main(profile: str) -> int:
    profiles = [str(ROOT / profile)] if profile else []
    with tempfile.TemporaryDirectory(prefix="weblm-bench-s3-") as tmp:
        tmp = Path(tmp)
        server = S3Server(tmp)
        try:
            local_overlay = tmp / "local.yaml"
            local_overlay.write_text(yaml.safe_dump({"paths": {"var": str(tmp / "local-run")}}))
            local = demo(profiles + [str(local_overlay)], tmp / "local-run" / "demo" / "summary.json")
            bucket = make_bucket(server.endpoint, "weblm-bench")
            s3_overlay = storage_overlay(tmp / "s3.yaml", server.endpoint,
                                         extra={"paths": {"var": f"{bucket}/run", "local": str(tmp / "s3-local")}})
            remote = demo(profiles + [str(s3_overlay)], tmp / "s3-local" / "demo" / "summary.json")
        finally:
            server.stop()
    print(f"{'stage':<16}{'local s':>9}{'s3 s':>9}{'s3/local':>10}")
    for stage in local:
        print(f"{stage:<16}{local[stage]:>9.1f}{remote.get(stage, 0):>9.1f}{remote.get(stage, 0) / max(local[stage], 1e-9):>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "conf/profiles/smoke.yaml"))
