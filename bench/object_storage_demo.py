"""Benchmark: the whole demo with every durable path on s3:// (or gs://) against the same demo on local disk.

    .venv/bin/python bench/object_storage_demo.py [PROFILE] [--store s3|gs]

PROFILE defaults to conf/profiles/smoke.yaml (a small web; use "" for the full demo).  The object store is a
real API server on 127.0.0.1, the tests' harness: moto's server mode for s3:// (Spark through s3a), or
fake-gcs-server for gs:// (`make fake-gcs-server`; Spark through Google's gcs-connector from `make jars`, the
demo's tables read back by delta-rs), so the ratio measures the cost of the object-storage code paths
(uploads, the Hadoop connector, staging, verification), not of a network.  Prints each stage's seconds for
both runs and the ratio remote / local.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.gcsserver import GcsServer, gcs_overlay  # noqa: E402
from tests.support.s3server import CREDENTIALS, S3Server, make_bucket, storage_overlay  # noqa: E402


def demo(overlays: list[str], summary_file: Path) -> dict:
    env = dict(os.environ, WEBLM_CONF_OVERLAY=",".join(overlays), SPARK_LOCAL_IP="127.0.0.1", **CREDENTIALS)
    proc = subprocess.run([sys.executable, "-m", "demo"], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(summary_file.read_text())


def remote_overlay(store: str, server, tmp: Path) -> Path:
    """An overlay that puts `paths.var` in a fresh bucket of `server` and `paths.local` on this machine."""
    if store == "s3":
        bucket, overlay = make_bucket(server.endpoint, "weblm-bench"), storage_overlay
    else:
        bucket, overlay = server.make_bucket("weblm-bench"), gcs_overlay
    paths = {"paths": {"var": f"{bucket}/run", "local": str(tmp / f"{store}-local")}}
    return overlay(tmp / f"{store}.yaml", server.endpoint, extra=paths)


def main(profile: str, store: str) -> int:
    profiles = [str(ROOT / profile)] if profile else []
    with tempfile.TemporaryDirectory(prefix=f"weblm-bench-{store}-") as tmp:
        tmp = Path(tmp)
        server = S3Server(tmp) if store == "s3" else GcsServer(tmp)
        try:
            local_overlay = tmp / "local.yaml"
            local_overlay.write_text(yaml.safe_dump({"paths": {"var": str(tmp / "local-run")}}))
            local = demo(profiles + [str(local_overlay)], tmp / "local-run" / "demo" / "summary.json")
            overlay = remote_overlay(store, server, tmp)
            remote = demo(profiles + [str(overlay)], tmp / f"{store}-local" / "demo" / "summary.json")
        finally:
            server.stop()
    # the tables as delta-rs read them back for the demo's summary, where each run left them
    for name, table in remote["tables"].items():
        print(f"{name:<22}{local['tables'][name]['rows']:>6} rows locally, {table['rows']:>6} at {table['path']}"
              + (f" ({table['error']})" if table.get("error") else ""))
    print(f"shards: {local['shards']['tokens']} tokens locally, {remote['shards']['tokens']} in the bucket")
    local, remote = local["seconds"], remote["seconds"]
    print(f"{'stage':<16}{'local s':>9}{store + ' s':>9}{store + '/local':>10}")
    for stage in local:
        there = remote.get(stage, 0)
        print(f"{stage:<16}{local[stage]:>9.1f}{there:>9.1f}{there / max(local[stage], 1e-9):>10.2f}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", nargs="?", default="conf/profiles/smoke.yaml")
    parser.add_argument("--store", choices=("s3", "gs"), default="s3")
    args = parser.parse_args()
    sys.exit(main(args.profile, args.store))
