"""Real Redis for the tests: Debian's `redis-server` on 127.0.0.1 (a single node or a 3-master cluster).

Each server runs in its own process and directory; `restart()` stops and starts it on the same port and data,
for the persistence tests.  Nothing is faked: the frontier's Lua scripts run inside a real Redis.
"""
from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from tests.support.s3server import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    def __init__(self, workdir: Path, persist: bool = False, cluster: bool = False, port: int | None = None):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.persist = persist
        self.cluster = cluster
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
                "--save", "", "--protected-mode", "no", "--logfile", str(self.workdir / "redis.log")]
        # appendfsync always: a restart mid-crawl must lose nothing acknowledged before it
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.workdir / "nodes.conf"),
                     "--cluster-node-timeout", "2000"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}; see {self.workdir / 'redis.log'}")
                time.sleep(0.05)
        if self.persist:  # wait for the AOF to be loaded before anyone reads
            while client.info("persistence").get("loading"):
                time.sleep(0.05)
        client.close()

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(20)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def used_memory(self) -> int:
        with redis.Redis(port=self.port) as client:
            return int(client.info("memory")["used_memory"])


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too: Redis refuses cluster ports above 55535, and the
    kernel's ephemeral picks go up to 60999."""
    while True:
        port = random.randint(20000, 55535)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


class RedisCluster:
    """Three masters, no replicas, slots spread by `redis-cli --cluster create`."""

    def __init__(self, workdir: Path):
        self.nodes: list[RedisServer] = []
        try:
            for i in range(3):
                self.nodes.append(RedisServer(workdir / f"node{i}", cluster=True, port=cluster_port()))
            cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
            subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
                            "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
            # every node, not only the first: each learns the slots by gossip on its own, and a command routed to
            # one still on "fail" answers CLUSTERDOWN (a frontier test failed so in CI, node 0 being ok)
            deadline = time.monotonic() + 30
            for node in self.nodes:
                with redis.Redis(port=node.port) as client:
                    while client.cluster("info").get("cluster_state") != "ok":
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"node {node.port} of the 3-node Redis Cluster did not reach state ok "
                                               "within 30 s")
                        time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
