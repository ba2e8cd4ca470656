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


class TestRedisClusterFrontier(TestRedisFrontier):
    """The same contract on a 3-master Redis Cluster: every script stays inside one hash slot."""

    @pytest.fixture(autouse=True)
    def _server(self, redis_cluster):
        self.server = redis_cluster


def test_a_frontier_refuses_a_changed_bloom_layout_or_partition_count(redis_server):
    from tests.spider.frontier.contract import T0, url
    backend = RedisFrontier(redis_server.url, f"t{next(_namespaces)}", 4, SMALL)
    backend.clear()
    assert backend.add([url("http://a.test/1")], T0, 0) == ["admitted"]
    for changed in (RedisFrontier(backend.url, backend.namespace, 4, BloomLayout(capacity=5000, fp_rate=1e-6)),
                    RedisFrontier(backend.url, backend.namespace, 8, SMALL)):
        with pytest.raises(Exception, match="Bloom layout"):  # the URLs it holds would look new again
            changed.add([url(f"http://{h}.test/1") for h in "abcdefgh"], T0, 0)
        changed.close()
    backend.close()
