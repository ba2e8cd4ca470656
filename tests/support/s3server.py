"""A real S3 API server for the tests: moto's server mode (`moto_server`) on 127.0.0.1, over real HTTP,
plus an optional TCP relay in front of it that can refuse service for a while (upload-failure tests).

Every test that touches object storage points conf/storage.yaml at this endpoint through an overlay
file (`WEBLM_CONF_OVERLAY`) and credentials through the standard AWS environment variables, so the code
under test runs exactly as against AWS: only configuration differs.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import closing
from pathlib import Path

import yaml

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "weblm-test", "AWS_SECRET_ACCESS_KEY": "weblm-test-secret",
               "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """A server in its own process on a free loopback port (or `port`), started by `args(port)` and ready once
    `probe_path` answers over HTTP; its output goes to `<log_dir>/<name>-<port>.log`; `stop()` ends it."""

    def __init__(self, name: str, args, probe_path: str, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"{name}-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args(self.port), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}; see {self._log.name}")
            try:
                urllib.request.urlopen(self.endpoint + probe_path, timeout=1).read()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{name} did not answer on {self.endpoint} within 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


class S3Server(HttpServer):
    """`moto_server` in its own process."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__("moto", lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         "/moto-api/", log_dir)


def make_bucket(endpoint: str, name: str) -> str:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
                          aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    client.create_bucket(Bucket=name)
    return f"s3://{name}"


def storage_overlay(path: Path, endpoint: str, extra: dict | None = None) -> Path:
    """An overlay file that points conf/storage.yaml at `endpoint` (path-style, as moto and MinIO need)."""
    return write_overlay(path, {"storage": {"s3": {"endpoint_url": endpoint, "path_style": True, "max_attempts": 2}}},
                         extra)


def write_overlay(path: Path, data: dict, extra: dict | None = None) -> Path:
    """Write conf overlay `data` to `path`, each top-level section of `extra` merged into it."""
    for section, values in (extra or {}).items():
        data.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(data))
    return path


class FlakyRelay:
    """A TCP relay to `target_port` that can be switched to refuse every connection (reset at once).

    It stands for an S3 endpoint that is down or refusing for a while: clients see real connection
    errors on real sockets; moto behind it keeps its state.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.refusing = threading.Event()
        self.refused = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.refusing.is_set():
                self.refused += 1
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()  # RST: the client gets "connection reset"
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._server.close()


def aws_env() -> dict[str, str]:
    """The process environment plus the test credentials (never real ones)."""
    env = dict(os.environ)
    env.update(CREDENTIALS)
    return env
