"""A worker that stalled past its leases sends none of the URLs it had not sent: their leases (and hosts) may be
another worker's by then.  It learns so from a refused renewal, or from the expiry passing before any answer.  What
it hands back names the lease it ends, so a host this worker leased again since stays busy."""
import time
from collections import Counter
from types import SimpleNamespace

from scrapy import Request

from spider.config import load_crawl_config
from spider.frontier import robots as robotstxt
from spider.frontier.backend import Leased, RobotsRecord
from spider.frontier.embedded import SqliteFrontier
from spider.frontier.scheduler import LEASE_META, FrontierScheduler, InHand, robots_key
from tests.spider.frontier.contract import SMALL, T0, urls_of
from tests.spider.frontier.contract import url as new_url

URLS = ("http://a.weblm.test/1", "http://b.weblm.test/1", "http://c.weblm.test/1")


def scheduler_with(expires: float) -> FrontierScheduler:
    """A scheduler holding three leased, unsent URLs (robots.txt and the TDMRep file known, allowing all); no backend
    is called."""
    stats = Counter()
    crawler = SimpleNamespace(settings={"WEBLM_CRAWL_CONFIG": load_crawl_config()},
                              stats=SimpleNamespace(inc_value=lambda key, n=1: stats.update({key: n}), counts=stats))
    s = FrontierScheduler(crawler, backend=object())
    s.spider = SimpleNamespace(parse=lambda response: None, on_error=lambda failure: None)
    now = time.time()
    for url in URLS:
        id_ = s.canon.id(url)
        item = InHand(Leased(id_, url.split("/")[2], "{}", expires, host_lease=5 + URLS.index(url)), url, {},
                      hot=False)
        s._in_hand[id_] = item
        s._buffer.append(item)
        s._robots[robots_key(url)] = robotstxt.parse(RobotsRecord("allow_all", b"", now, now + 3600, tdm=b""))
    return s


def sent(s: FrontierScheduler) -> list[str]:
    out = []
    while (request := s.next_request()) is not None:
        out.append(request.url)
    return out


def handed_back(s: FrontierScheduler) -> tuple[list[str], list[str]]:
    requeued = [id_ for name, args in s._ops if name == "requeue" for id_ in args[0]]
    released = [(args[0], args[3]) for name, args in s._ops if name == "release_host"]  # host, the lease it ends
    return requeued, released


def test_a_refused_renewal_keeps_the_url_from_being_sent_and_hands_it_back():
    s = scheduler_with(expires=time.time() + 60)
    a, b, c = (s.canon.id(u) for u in URLS)
    until = time.time() + 120
    s._renewed([a, b, c], {a, c}, until)   # b's lease expired while the worker stalled; the others are still its own
    assert s._in_hand[a].expires == until
    assert s.stats.counts["weblm/frontier/leases_lost"] == 1
    assert sent(s) == [URLS[0], URLS[2]]
    assert b not in s._in_hand and s.stats.counts["weblm/frontier/lapsed_unsent"] == 1
    # given back: a no-op in the frontier where another worker holds it now, a quick return where nobody does
    assert handed_back(s) == ([b], [("b.weblm.test", 6)])


def test_a_lease_past_its_expiry_is_not_sent_before_any_renewal_answers():
    s = scheduler_with(expires=time.time() - 1)  # the worker woke up after its leases ran out
    assert sent(s) == []
    assert not s._in_hand and s.stats.counts["weblm/frontier/lapsed_unsent"] == 3
    assert sorted(handed_back(s)[1]) == [("a.weblm.test", 5), ("b.weblm.test", 6), ("c.weblm.test", 7)]


def test_a_parked_request_whose_lease_ran_out_is_not_sent():
    s = scheduler_with(expires=time.time() + 60)
    item = s._buffer.popleft()
    s._park(s._send(item), time.time() - 1)  # its robots.txt answered; the URL waited out the host's delay
    item.expires = time.time() - 0.5        # ... longer than its lease
    requests = sent(s)
    assert URLS[0] not in requests and requests == list(URLS[1:])
    assert item.lease.id not in s._in_hand and item.lease.id not in s._sent
    assert handed_back(s) == ([item.lease.id], [("a.weblm.test", 5)])


def test_a_fetch_that_ends_after_its_lease_lapsed_does_not_free_the_hosts_newer_lease(tmp_path):
    """The worker's lease of a host lapsed during a long fetch, and the same worker leased the host again: the late
    fetch's outcome, applied to a real frontier, leaves the host busy with the newer lease (it names its own)."""
    frontier = SqliteFrontier(str(tmp_path / "frontier.sqlite"), SMALL)
    try:
        frontier.add([new_url("http://a.weblm.test/1"), new_url("http://a.weblm.test/2")], T0, 0)
        (first,) = frontier.lease(1, T0, 30)
        (again,) = frontier.lease(1, T0 + 31, 30)  # the same URL, this worker's again
        s = scheduler_with(expires=time.time() + 60)
        s._in_hand[first.id] = InHand(first, "http://a.weblm.test/1", {}, hot=False)
        request = Request("http://a.weblm.test/1", meta={LEASE_META: first.id})
        s._on_fetch_finished(request, failed=False)
        ops = [(name, args) for name, args in s._ops if args and args[0] in ([first.id], "a.weblm.test")]
        assert [name for name, _ in ops] == ["fetched", "release_host"]
        frontier.apply(ops)
        assert frontier.counts(T0 + 32)["busy_hosts"] == 1 and frontier.lease(5, T0 + 32, 30) == []
        assert frontier.release_host("a.weblm.test", T0 + 33, None, again.host_lease) is True
        assert urls_of(frontier.lease(5, T0 + 33, 30)) == ["http://a.weblm.test/2"]
    finally:
        frontier.close()
