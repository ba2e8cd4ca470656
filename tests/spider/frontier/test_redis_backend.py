"""The Redis backend against the frontier contract, on a real redis-server."""
from __future__ import annotations

import itertools
import sqlite3

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

    def reopen(self, backend: RedisFrontier, bloom: BloomLayout | None = None) -> RedisFrontier:
        return RedisFrontier(backend.url, backend.namespace, backend.partitions, bloom or backend.bloom)


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


def test_the_bloom_bits_are_the_layouts_own_and_byte_identical_in_both_backends(redis_server, tmp_path):
    """Redis (one partition) and SQLite set the very bits `BloomLayout` names, so a URL's filter does not depend
    on the backend and the Python layout's false-positive arithmetic is the one that holds."""
    from spider.frontier.embedded import SqliteFrontier
    from tests.spider.frontier.contract import T0, url
    redis_fb = RedisFrontier(redis_server.url, f"t{next(_namespaces)}", 1, SMALL)
    redis_fb.clear()
    sqlite_fb = SqliteFrontier(str(tmp_path / "frontier.sqlite"), SMALL)
    news = [url(f"http://h{i % 7}.test/{i}") for i in range(300)]
    try:
        for fb in (redis_fb, sqlite_fb):
            assert fb.add(news, T0, 0) == ["admitted"] * 300
            assert fb.add(news[:50], T0, 0) == ["seen"] * 50
        with sqlite3.connect(sqlite_fb.path) as db:
            blocks = dict(db.execute("SELECT block, bits FROM bloom"))
        expected: dict[int, bytearray] = {}
        stage = SMALL.stages[0]
        for new in news:
            block, bits = stage.positions(new.bloom)
            buf = expected.setdefault(block, bytearray(SMALL.block_bytes))
            for p in bits:
                buf[p >> 3] |= 0x80 >> (p & 7)
        assert {block: bytes(buf) for block, buf in blocks.items()} == {b: bytes(v) for b, v in expected.items()}
        for block, buf in expected.items():
            assert redis_fb.client.get(redis_fb.prefix(0) + f"bf:0:{block}") == bytes(buf)
    finally:
        redis_fb.close()
        sqlite_fb.close()


@pytest.mark.parametrize("where", ["redis_server", "redis_cluster"])
def test_operations_go_in_one_round_trip_without_asking_for_scripts_and_survive_a_script_flush(where, request):
    """A tick's operations travel as one pipeline of EVALSHAs (redis-py's own pipelines ask SCRIPT EXISTS first,
    a second round trip each time; on a cluster, one pipeline per node); a server that lost its scripts
    (restart, SCRIPT FLUSH) gets them again."""
    from redis.cluster import RedisCluster
    from spider.frontier.redis_backend import connect
    from tests.spider.frontier.contract import T0, url
    server = request.getfixturevalue(where)
    backend = RedisFrontier(server.url, f"t{next(_namespaces)}", 4, SMALL)
    backend.clear()
    admin = connect(server.url)

    def calls(command: str) -> int:
        if isinstance(admin, RedisCluster):  # per node; summed
            stats = admin.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
            return sum(int(node.get(f"cmdstat_{command}", {}).get("calls", 0)) for node in stats.values())
        return int(admin.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    try:
        backend.add([url(f"http://{h}.test/{i}") for h in "abcdef" for i in (1, 2)], T0, 0)
        leased = backend.lease(6, T0, 30)
        exists, evalsha = calls("script|exists"), calls("evalsha")
        admin.script_flush()
        backend.apply([op for item in leased for op in (("fetched", ([item.id], T0 + 100)),
                                                        ("release_host", (item.host, T0)))])
        assert calls("script|exists") == exists
        assert calls("evalsha") - evalsha == 2 * 12  # every command refused once (no script), then run again
        assert backend.counts(T0)["held"] == 6 and backend.counts(T0)["busy_hosts"] == 0
        again = backend.lease(6, T0, 30)
        assert sorted(item.host for item in again) == [f"{h}.test" for h in "abcdef"]
    finally:
        admin.close()
        backend.close()


def test_an_operation_with_no_command_form_is_applied_by_a_call_of_its_own(redis_server):
    from tests.spider.frontier.contract import T0, url
    backend = RedisFrontier(redis_server.url, f"t{next(_namespaces)}", 4, SMALL)
    backend.clear()
    try:
        backend.add([url("http://a.test/1")], T0, 0)
        (item,) = backend.lease(1, T0, 30)
        backend.apply([("host_state", ("a.test",)), ("release_host", ("a.test", T0))])
        assert backend.counts(T0)["busy_hosts"] == 0
        outcomes, leased = backend.step([url("http://b.test/1")], [("host_state", ("a.test",))], 5, T0, 30, 0)
        assert outcomes == ["admitted"] and [i.host for i in leased] == ["b.test"]
    finally:
        backend.close()


def test_a_frontier_that_kept_times_in_seconds_is_rescaled_when_opened_and_keeps_its_waits_and_leases(redis_server,
                                                                                                      caplog):
    """Times were seconds before they were milliseconds (common.lua): a frontier written then is rescaled once, when
    a worker opens it, so no host's politeness wait is cut short and no lease expires early or late."""
    from spider.frontier.redis_backend import connect
    from tests.spider.frontier.contract import T0, url, urls_of
    backend = RedisFrontier(redis_server.url, f"t{next(_namespaces)}", 4, SMALL)
    backend.clear()
    admin = connect(redis_server.url)
    try:
        backend.add([url("http://a.test/1"), url("http://a.test/2"), url("http://b.test/1"), url("http://c.test/1")],
                    T0, 0)
        leased = {item.host: item for item in backend.lease(3, T0, 60)}
        backend.release_host("a.test", T0 + 10)  # a waits 10 s for its second URL
        backend.fetched([leased["b.test"].id], T0 + 100)  # b is held; a/1 and c stay leased until T0 + 60
        kept = 0
        for p in range(backend.partitions):  # what the code before kept: the same times, in seconds
            for zset in ("ready", "busy", "lease", "held", "due"):
                key = backend.prefix(p) + zset
                for member, score in admin.zrange(key, 0, -1, withscores=True):
                    admin.zadd(key, {member: score / 1000})
                    kept += 1
        assert kept == 6  # ready a; busy b and c; leases of a/1 and c/1; held b
        with caplog.at_level("WARNING", logger="spider.frontier.redis_backend"):
            opened = RedisFrontier(backend.url, backend.namespace, backend.partitions, backend.bloom)
        assert "6 times kept in seconds" in caplog.text
        counts = opened.counts(T0 + 1)
        assert (counts["ready_hosts"], counts["waiting_hosts"], counts["leased"], counts["held"]) == (0, 1, 2, 1)
        assert opened.lease(5, T0 + 9.9, 60) == []  # a still waits, c's lease holds
        assert urls_of(opened.lease(5, T0 + 10, 60)) == ["http://a.test/2"]
        # the leases expire at T0 + 60: c/1 comes again; a/1 waits while a/2's fetch keeps its host busy
        assert urls_of(opened.lease(5, T0 + 59.9, 60)) == []
        assert urls_of(opened.lease(5, T0 + 60.5, 60)) == ["http://c.test/1"]
        caplog.clear()
        with caplog.at_level("WARNING", logger="spider.frontier.redis_backend"):
            RedisFrontier(backend.url, backend.namespace, backend.partitions, backend.bloom).close()
        assert "rescaled" not in caplog.text  # once only
        opened.close()
    finally:
        admin.close()
        backend.close()


def test_a_lease_takes_the_hosts_that_waited_longest_even_when_one_partition_holds_them_all(redis_server):
    """Each partition is peeked for about twice its share of the lease, and asked again for all of it where every
    host it showed was picked: the pick across partitions stays exact when the longest waiters sit in one."""
    from tests.spider.frontier.contract import T0, url
    backend = RedisFrontier(redis_server.url, f"t{next(_namespaces)}", 4, SMALL)
    backend.clear()
    hosts = [f"h{i}.test" for i in range(200)]
    crowded = [h for h in hosts if backend.partition(h) == 0][:10]
    others = [h for h in hosts if backend.partition(h) != 0][:20]
    assert len(crowded) == 10 and backend._peek_depth(8) < 8
    chosen = crowded + others
    assert backend.add([url(f"http://{h}/{n}") for h in chosen for n in (1, 2)], T0, 0).count("admitted") == 60
    assert len(backend.lease(len(chosen), T0, 60)) == len(chosen)
    waited = {h: T0 + 1 + i for i, h in enumerate(crowded)} | {h: T0 + 20 + i for i, h in enumerate(others)}
    for host, next_at in waited.items():
        assert backend.release_host(host, next_at)
    leased = backend.lease(8, T0 + 100, 60)
    assert [item.host for item in sorted(leased, key=lambda item: waited[item.host])] == crowded[:8]
    backend.close()
