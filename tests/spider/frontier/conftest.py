"""A real redis-server for the frontier tests (Debian's package; .ci/system-deps installs it)."""
from __future__ import annotations

import pytest

from tests.support.redisserver import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()
