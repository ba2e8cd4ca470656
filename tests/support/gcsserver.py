"""A real Google Cloud Storage JSON API server for the tests: fsouza/fake-gcs-server on 127.0.0.1, over real HTTP,
in memory, the GCS counterpart of moto's server mode (tests/support/s3server.py).  `make test` builds it into
.venv/bin (Makefile `fake-gcs-server`).  Both gcsfs and Google's Hadoop connector (Spark's gs://) work against it;
gcp-storage-emulator, the PyPI server used before, answered the connector's writes of a Delta log with 404s.

Tests point conf/storage.yaml's `gcs` section at it through an overlay file (`WEBLM_CONF_OVERLAY`), so the code
under test reaches it through gcsfs and google-cloud-storage exactly as it reaches Google's endpoint: only
configuration differs.
"""
from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from tests.support.s3server import HttpServer, write_overlay

PROJECT = "weblm-test"


class GcsServer(HttpServer):
    """`fake-gcs-server` (in memory, plain HTTP) in its own process."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__("fake-gcs-server", lambda port: [
            str(Path(sys.executable).parent / "fake-gcs-server"), "-scheme", "http", "-host", "127.0.0.1",
            "-port", str(port), "-public-host", f"127.0.0.1:{port}", "-backend", "memory", "-log-level", "warn"],
            f"/storage/v1/b?project={PROJECT}", log_dir)

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` through the JSON API (buckets.insert); returns `gs://name`."""
        request = urllib.request.Request(f"{self.endpoint}/storage/v1/b?project={PROJECT}", method="POST",
                                         data=json.dumps({"name": name}).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()
        return f"gs://{name}"


def gcs_overlay(path: Path, endpoint: str, extra: dict | None = None) -> Path:
    """An overlay file that points conf/storage.yaml's gcs section at `endpoint`, without credentials."""
    return write_overlay(path, {"storage": {"gcs": {"endpoint_url": endpoint, "anonymous": True}}}, extra)
