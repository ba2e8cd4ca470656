"""frontier.tdmrep: respect, inside the scheduler: a host's URLs wait for its robots.txt record *with* its TDMRep file
(a record without one is asked again), a URL the file reserves is acknowledged unfetched like a disallowed one, and a
worker that closes while the file's request is parked frees the host.  No backend is called: the operations the
scheduler queues for it are read instead."""
import json
import time
from collections import Counter
from types import SimpleNamespace

from scrapy import Request
from scrapy.http import TextResponse
from scrapy.signalmanager import SignalManager

from spider.config import load_crawl_config
from spider.frontier import robots as robotstxt
from spider.frontier.backend import Leased, RobotsRecord
from spider.frontier.scheduler import ROBOTS_UNASKED, TDMREP_META, FrontierScheduler, InHand, robots_key
from spider.signals import url_not_fetched

RULES = json.dumps([{"location": "/private/*", "tdm-reservation": 1}]).encode()


def scheduler(mode: str, *overrides: str) -> FrontierScheduler:
    stats = Counter()
    cfg = load_crawl_config([f"frontier.tdmrep={mode}", *overrides])
    crawler = SimpleNamespace(settings={"WEBLM_CRAWL_CONFIG": cfg}, signals=SignalManager(),
                              stats=SimpleNamespace(inc_value=lambda key, n=1: stats.update({key: n}), counts=stats))
    s = FrontierScheduler(crawler, backend=object())
    s.spider = SimpleNamespace(parse=lambda response: None, on_error=lambda failure: None)
    s.not_fetched = []   # what the WARC writer would record

    def heard(url, reason, detail):
        s.not_fetched.append((url, reason))

    crawler.signals.connect(heard, signal=url_not_fetched, weak=False)
    return s


def lease(s: FrontierScheduler, url: str, host_lease: int = 1) -> InHand:
    id_ = s.canon.id(url)
    item = InHand(Leased(id_, "a.weblm.test", "{}", time.time() + 60, host_lease=host_lease), url, {}, hot=False)
    s._in_hand[id_] = item
    s._buffer.append(item)
    return item


def known(s: FrontierScheduler, tdm: bytes | None, status: str = "allow_all", body: bytes = b"",
          detail: str = "HTTP 404") -> None:
    now = time.time()
    s._robots["a.weblm.test"] = robotstxt.parse(RobotsRecord(status, body, now, now + 3600, detail, tdm))


def test_a_robots_record_without_the_file_is_asked_again_only_when_the_file_is_respected():
    for mode, first in (("respect", "http://a.weblm.test/robots.txt"), ("archive", "http://a.weblm.test/page")):
        s = scheduler(mode)
        known(s, None)   # written before the file rode with robots.txt, or by a worker that did not ask for it
        lease(s, "http://a.weblm.test/page")
        assert s.next_request().url == first, mode


def test_a_reserved_url_is_acknowledged_unfetched_and_the_others_are_sent():
    s = scheduler("respect")
    known(s, RULES)
    private = lease(s, "http://a.weblm.test/private/x")
    lease(s, "http://a.weblm.test/public/y", host_lease=2)
    assert s.next_request().url == "http://a.weblm.test/public/y"
    assert s.stats.counts["weblm/tdmrep/reserved"] == 1 and "weblm/robots_denied" not in s.stats.counts
    assert [args[0] for name, args in s._ops if name == "deny"] == [[private.lease.id]]
    assert private.lease.id not in s._in_hand
    # a link to a reserved page is never queued once the rules are known
    s.admission = SimpleNamespace(reason=lambda url, depth: None, knows=lambda host: True)
    assert s.enqueue_request(Request("http://a.weblm.test/private/z")) is False
    assert s.enqueue_request(Request("http://a.weblm.test/private/z")) is False   # linked again from another page
    assert s.stats.counts["weblm/tdmrep/reserved"] == 3 and not s._adds
    # each URL is recorded as not fetched, and why: once, however often it is linked
    assert s.not_fetched == [("http://a.weblm.test/private/x", "tdmrep_reserved"),
                             ("http://a.weblm.test/private/z", "tdmrep_reserved")]


def test_the_file_is_asked_after_robots_txt_and_its_answer_completes_the_record():
    s = scheduler("respect")
    item = lease(s, "http://a.weblm.test/private/x")
    robots = s.next_request()
    assert robots.url == "http://a.weblm.test/robots.txt"
    s._robots_answer(TextResponse(robots.url, status=404, body=b"", request=robots))
    assert robots_key(item.url) not in s._robots   # not yet: the file is asked first, one delay later
    (_, _, ask), = s._delayed
    assert ask.url == "http://a.weblm.test/.well-known/tdmrep.json" and ask.meta[TDMREP_META] == "a.weblm.test"
    s._tdmrep_answer(TextResponse(ask.url, status=200, body=RULES, request=ask))
    record = s._robots["a.weblm.test"].record
    assert record.tdm == RULES and ("robots_put", ("a.weblm.test", record)) in s._ops
    assert s.stats.counts["weblm/tdmrep/reserved"] == 1 and s.stats.counts["weblm/tdmrep/found"] == 1


def test_closing_while_the_files_request_is_parked_frees_the_host():
    s = scheduler("respect")
    item = lease(s, "http://a.weblm.test/page", host_lease=7)
    robots = s.next_request()
    s._robots_answer(TextResponse(robots.url, status=404, body=b"", request=robots))
    assert len(s._delayed) == 1
    s.close("shutdown")
    released = [(args[0], args[3]) for name, args in s._ops if name == "release_host"]
    assert released == [("a.weblm.test", 7)]   # no answer will come for a request never sent
    assert [args[0] for name, args in s._ops if name == "requeue"] == [[item.lease.id]]


def test_without_obeying_robots_txt_the_file_alone_is_asked_at_once_and_still_reserves():
    s = scheduler("respect", "obey_robots=false")
    private = lease(s, "http://a.weblm.test/private/x")
    assert s.next_request() is None   # the URL waits for the file; robots.txt is never asked
    (at, _, ask), = s._delayed
    assert ask.url == "http://a.weblm.test/.well-known/tdmrep.json" and at <= time.time()
    assert ask.meta["weblm_parent"] == private.url and s.stats.counts["weblm/robots/not_asked"] == 1
    assert "weblm/robots/fetches" not in s.stats.counts
    s._tdmrep_answer(TextResponse(ask.url, status=200, body=RULES, request=ask))
    record = s._robots["a.weblm.test"].record
    assert (record.status, record.detail, record.tdm) == ("allow_all", ROBOTS_UNASKED, RULES)
    assert not [k for k in s.stats.counts if k.startswith("weblm/robots/") and k != "weblm/robots/not_asked"]
    assert s.stats.counts["weblm/tdmrep/reserved"] == 1
    assert [args[0] for name, args in s._ops if name == "deny"] == [[private.lease.id]]


def test_without_obeying_robots_txt_its_rules_are_ignored_but_the_files_are_not():
    s = scheduler("respect", "obey_robots=false")
    known(s, RULES, "parsed", b"User-agent: *\nDisallow: /\n", "HTTP 200")   # an obeying worker's record
    lease(s, "http://a.weblm.test/private/x")
    lease(s, "http://a.weblm.test/public/y", host_lease=2)
    assert s.next_request().url == "http://a.weblm.test/public/y"
    assert s.stats.counts["weblm/tdmrep/reserved"] == 1 and "weblm/robots_denied" not in s.stats.counts
    for mode in ("archive", "off"):   # nothing to ask: sent at once
        s = scheduler(mode, "obey_robots=false")
        lease(s, "http://a.weblm.test/private/x")
        assert s.next_request().url == "http://a.weblm.test/private/x", mode


def test_a_worker_that_obeys_robots_txt_asks_it_where_the_record_holds_only_the_file():
    s = scheduler("respect")
    known(s, b"", detail=ROBOTS_UNASKED)
    lease(s, "http://a.weblm.test/page")
    assert s.next_request().url == "http://a.weblm.test/robots.txt"
    s.admission = SimpleNamespace(reason=lambda url, depth: None, knows=lambda host: True)
    assert s.enqueue_request(Request("http://a.weblm.test/other")) is True   # queued: its rules are not known here
