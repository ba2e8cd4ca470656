"""A real Google Cloud Storage JSON API server for the tests: gcp-storage-emulator's server on 127.0.0.1, over
real HTTP, the GCS counterpart of moto's server mode (tests/support/s3server.py).

Tests point conf/storage.yaml's `gcs` section at it through an overlay file (`WEBLM_CONF_OVERLAY`), so the code
under test reaches it through gcsfs and google-cloud-storage exactly as it reaches Google's endpoint: only
configuration differs.
"""
from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import yaml

from tests.support.s3server import HttpServer

PROJECT = "weblm-test"


class GcsServer(HttpServer):
    """`gcp-storage-emulator start` (in memory) in its own process."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__("gcs-emulator", lambda port: [
            sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
            "--in-memory", "--quiet"], f"/storage/v1/b?project={PROJECT}", log_dir)

    def make_bucket(self, name: str) -> str:
        """Create bucket `name` through the JSON API (buckets.insert); returns `gs://name`."""
        request = urllib.request.Request(f"{self.endpoint}/storage/v1/b?project={PROJECT}", method="POST",
                                         data=json.dumps({"name": name}).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()
        return f"gs://{name}"


def gcs_overlay(path: Path, endpoint: str) -> Path:
    """An overlay file that points conf/storage.yaml's gcs section at `endpoint`, without credentials."""
    path.write_text(yaml.safe_dump({"storage": {"gcs": {"endpoint_url": endpoint, "anonymous": True}}}))
    return path
