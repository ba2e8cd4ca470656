"""A real redis-server for the frontier tests (Debian's package; .ci/system-deps installs it)."""
from __future__ import annotations

import pytest

from tests.support.redisserver import RedisCluster, RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()
