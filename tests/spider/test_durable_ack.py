"""A WARC file that becomes durable acknowledges only the fetches this worker finished and still holds."""
from types import SimpleNamespace

from spider.config import load_crawl_config
from spider.frontier.scheduler import FrontierScheduler
from spider.signals import DurableWarc

DONE = "http://a.weblm.test/done"
RETRIED = "http://a.weblm.test/retried"     # answered 503; sent back to the frontier as a retry
ELSEWHERE = "http://b.weblm.test/other"     # never held here


def durable(recovered: bool = False) -> DurableWarc:
    urls = (DONE, RETRIED, ELSEWHERE)
    return DurableWarc(name="w.warc.gz", location="/tmp/w.warc.gz", bytes=1, urls=urls,
                       record_ids=tuple(f"<urn:uuid:{i}>" for i in range(len(urls))), recovered=recovered)


def scheduler() -> FrontierScheduler:
    crawler = SimpleNamespace(settings={"WEBLM_CRAWL_CONFIG": load_crawl_config()}, stats=None)
    s = FrontierScheduler(crawler, backend=object())   # no backend call: the acks are queued as operations
    s._held.add(s.canon.id(DONE))
    return s


def acked(s: FrontierScheduler) -> set[str]:
    return {id_ for name, args in s._ops if name == "ack" for id_ in args[0]}


def test_a_durable_file_acks_only_what_this_worker_holds():
    s = scheduler()
    s._on_durable(durable())
    # the retried URL (its 503 is in the file) and another worker's URL stay live in the frontier
    assert acked(s) == {s.canon.id(DONE)}
    assert not s._held


def test_a_recovered_file_acks_every_fetch_in_it():
    s = scheduler()
    s._on_durable(durable(recovered=True))
    assert acked(s) == {s.canon.id(u) for u in (DONE, RETRIED, ELSEWHERE)}
