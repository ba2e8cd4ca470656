"""A WARC file that becomes durable acknowledges a URL only through the record of the fetch that finished it here."""
from collections import Counter
from types import SimpleNamespace

from scrapy import Request

from spider.config import load_crawl_config
from spider.frontier.backend import Leased
from spider.frontier.scheduler import LEASE_META, FrontierScheduler, InHand
from spider.signals import DurableWarc

DONE = "http://a.weblm.test/done"
RETRIED = "http://a.weblm.test/retried"     # answered 503; sent back to the frontier as a retry
ELSEWHERE = "http://b.weblm.test/other"     # never held here


def durable(urls: tuple[str, ...], record_ids: tuple[str, ...], recovered: bool = False) -> DurableWarc:
    return DurableWarc(name="w.warc.gz", location="/tmp/w.warc.gz", bytes=1, urls=urls, record_ids=record_ids,
                       recovered=recovered)


def scheduler() -> FrontierScheduler:
    stats = Counter()
    crawler = SimpleNamespace(settings={"WEBLM_CRAWL_CONFIG": load_crawl_config()},
                              stats=SimpleNamespace(inc_value=lambda key, n=1: stats.update({key: n}), counts=stats))
    return FrontierScheduler(crawler, backend=object())   # no backend call: the acks are queued as operations


def finish(s: FrontierScheduler, url: str, record_id: str) -> None:
    """What the crawl does when a leased URL's fetch ends: held (fetch_finished), then recorded (fetch_recorded)."""
    id_ = s.canon.id(url)
    s._in_hand[id_] = InHand(Leased(id_, "a.weblm.test", "{}", expires=0.0), url, {}, hot=False)
    s._held.add(id_)
    s._on_fetch_recorded(Request(url, meta={LEASE_META: id_}), record_id)


def acked(s: FrontierScheduler) -> set[str]:
    return {id_ for name, args in s._ops if name == "ack" for id_ in args[0]}


def test_a_durable_file_acks_only_what_this_worker_holds():
    s = scheduler()
    finish(s, DONE, "<urn:uuid:done>")
    s._on_durable(durable((DONE, RETRIED, ELSEWHERE), ("<urn:uuid:done>", "<urn:uuid:503>", "<urn:uuid:b>")))
    # the retried URL (its 503 is in the file) and another worker's URL stay live in the frontier
    assert acked(s) == {s.canon.id(DONE)}
    assert [args[-1] for name, args in s._ops if name == "ack"] == [False]
    assert not s._held and not s._in_hand


def test_a_refusal_in_an_earlier_file_does_not_ack_the_retry_this_worker_fetched_since():
    s = scheduler()
    # this worker got a 503 (recorded in file 1), requeued it, leased it again, and got the 200 (in file 2, open)
    finish(s, RETRIED, "<urn:uuid:503>")
    s._retry(s.canon.id(RETRIED), Request(RETRIED, meta={LEASE_META: s.canon.id(RETRIED)}))
    assert s.stats.counts["weblm/frontier/retries_requeued"] == 1
    finish(s, RETRIED, "<urn:uuid:200>")
    s._ops.clear()
    s._on_durable(durable((RETRIED,), ("<urn:uuid:503>",)))
    assert acked(s) == set()                          # file 1 durable: the 200 is not yet
    assert s.canon.id(RETRIED) in s._held
    s._on_durable(durable((RETRIED,), ("<urn:uuid:200>",)))
    assert acked(s) == {s.canon.id(RETRIED)}


def test_a_fetch_never_recorded_is_never_acknowledged():
    s = scheduler()
    finish(s, DONE, "<urn:uuid:done>")
    s._in_hand[s.canon.id(DONE)].record_id = None    # the writer stopped before taking it
    s._on_durable(durable((DONE,), ("<urn:uuid:done>",)))
    assert acked(s) == set()                          # its hold expires and it is fetched again


def test_a_recovered_file_acks_every_fetch_in_it():
    s = scheduler()
    s._on_durable(durable((DONE, RETRIED, ELSEWHERE), ("<urn:uuid:1>", "<urn:uuid:2>", "<urn:uuid:3>"),
                          recovered=True))
    assert acked(s) == {s.canon.id(u) for u in (DONE, RETRIED, ELSEWHERE)}
    # whoever holds them now: the worker that fetched them is gone (a normal file acks only this worker's leases)
    assert [args[-1] for name, args in s._ops if name == "ack"] == [True]
