"""The Redis backend against the frontier contract, on a real redis-server."""
from __future__ import annotations

import itertools

import pytest

from spider.frontier.bloom import BloomLayout
from spider.frontier.redis_backend import RedisFrontier
from tests.spider.frontier.contract import SMALL, FrontierContract

_namespaces = itertools.count()


class TestRedisFrontier(FrontierContract):
    @pytest.fixture(autouse=True)
    def _server(self, redis_server):
        self.server = redis_server

    def make_backend(self, bloom: BloomLayout = SMALL) -> RedisFrontier:
        backend = RedisFrontier(self.server.url, f"t{next(_namespaces)}", 4, bloom)
        backend.clear()
        return backend

    def reopen(self, backend: RedisFrontier) -> RedisFrontier:
        return RedisFrontier(backend.url, backend.namespace, backend.partitions, backend.bloom)
