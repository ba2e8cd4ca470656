"""A scheduler tick whose operations fail part way, on a real redis-server: what the frontier took stays taken and
counted, the rest is kept, in order, for the next tick, and nothing is applied twice."""
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from twisted.python.failure import Failure

from spider.config import load_crawl_config
from spider.frontier.bloom import BloomLayout
from spider.frontier.redis_backend import RedisFrontier
from spider.frontier.scheduler import FrontierScheduler, _Unapplied
from tests.spider.frontier.contract import url


def test_a_tick_that_fails_part_way_keeps_the_rest_and_counts_what_went_in(redis_server):
    backend = RedisFrontier(redis_server.url, "tick", 4, BloomLayout(capacity=1000, fp_rate=1e-6, block_bytes=4096))
    backend.clear()
    stats = Counter()
    crawler = SimpleNamespace(settings={"WEBLM_CRAWL_CONFIG": load_crawl_config()},
                              stats=SimpleNamespace(inc_value=lambda key, n=1: stats.update({key: n}),
                                                    set_value=lambda key, value: None))
    s = FrontierScheduler(crawler, backend=backend)
    try:
        now = time.time()
        backend.add([url("http://a.test/1"), url("http://b.test/1")], now, 0)
        a, b = sorted(backend.lease(2, now, 60), key=lambda item: item.host)
        ops = [("release_host", ("a.test", now)), ("ack", (None, None, now)), ("release_host", ("b.test", now))]
        adds = [url("http://a.test/2"), url("http://a.test/1")]
        with pytest.raises(_Unapplied) as failed:
            s._apply(ops, adds, 0, [], now)
        s._failed(Failure(failed.value))
        # the URLs went in and are counted; the failed operation and the one after it wait for the next tick
        assert s._ops == ops[1:] and s._adds == []
        assert stats["weblm/frontier/admitted"] == 1 and stats["weblm/filtered/seen"] == 1
        assert stats["weblm/errors/frontier_backend"] == 1
        assert backend.counts(now)["busy_hosts"] == 1  # a's host is free; b's is not yet
        s._ops = [op for op in s._ops if op[0] != "ack"]  # the bad operation fixed: the next tick applies the rest
        s._apply(s._ops, [], 0, [], now)
        counts = backend.counts(now)
        assert (counts["busy_hosts"], counts["queued"], counts["leased"]) == (0, 1, 2)
    finally:
        backend.close()
