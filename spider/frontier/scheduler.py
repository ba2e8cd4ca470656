"""FrontierScheduler: Scrapy's scheduler over the shared frontier (spider/frontier/backend.py).

The reactor never waits on the backend.  Everything the backend must learn (new URLs, fetch outcomes, retries,
acknowledgements, lease renewals) is queued as an operation and applied, in order, by one background thread,
which also leases the next URLs into a small local buffer (Frontera's refill: only while the buffer is short).
`next_request` serves from that buffer and returns None when it is empty.

Per leased URL: its host's robots.txt record comes with the lease (fetched once per host for the cluster, here,
by the worker that holds the host); a disallowed URL is acknowledged unfetched and refunded from the host's budget.
The sitemaps a fetched robots.txt lists join the frontier as URLs the spider reads as sitemaps (`frontier.sitemaps`).
With `frontier.tdmrep: respect` the host's TDMRep file (/.well-known/tdmrep.json) is asked next, one delay later, and
rides in the same record: a URL it reserves is acknowledged unfetched like a disallowed one (`archive`: the file joins
the frontier as a URL, and every page is fetched).  With `obey_robots: false` robots.txt is neither asked nor read, but
the TDMRep file still is (a reservation is its own opt-out, not a robots.txt rule): its answer rides in a record marked
`ROBOTS_UNASKED`, which a worker that obeys robots.txt takes as unknown and asks again.
An allowed one is sent; when its fetch ends (FetchOutcomeMiddleware) the host is released until the time
politeness says (spider/frontier/politeness.py) and the URL is *held* until the WARC record of that fetch
(`fetch_recorded` names it) is in a durable file (`warc_file_durable`), then acknowledged.  A retry goes back to
the frontier with its retry count.  A killed worker renews nothing, so its URLs come back after `frontier.lease_s`.
A worker that stalled past its leases (their renewals came back refused, or their expiry passed before one came
back) sends none of the URLs it has not sent yet: other workers may hold them and their hosts by then.
"""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import random
import time
from collections import defaultdict, deque
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urljoin, urlsplit

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.http import Request
from twisted.internet import task
from twisted.python.threadpool import ThreadPool
from twisted.internet.threads import deferToThreadPool

import tdmrep
from spider.config import CrawlConfig
from spider.frontier import robots as robotstxt
from spider.frontier.admission import Admission
from spider.frontier.backend import FrontierBackend, HostState, Leased, NewUrl, RobotsRecord, Unapplied
from spider.frontier import open_backend
from spider.frontier.bloom import url_hashes
from spider.frontier.canonical import Canonicalizer, without_default_port
from spider.frontier import recrawl
from spider.frontier.politeness import after_fetch, politeness_key, with_crawl_delay
from spider.frontier.outcome import fetch_failed, fetch_finished
from spider.signals import DurableWarc, fetch_recorded, url_not_fetched, warc_file_durable, warc_flush_requested

logger = logging.getLogger(__name__)

ROBOTS_META = "weblm_robots_for"
TDMREP_META = "weblm_tdmrep_for"   # frontier.tdmrep: respect: the host's TDMRep file, asked right after its robots.txt
ROBOTS_UNASKED = "not asked"  # a record's detail: obey_robots: false asked only the TDMRep file (allow_all, no rules)
LEASE_META = "weblm_lease"
# Meta keys that travel with a URL through the frontier (JSON); the rest is per attempt.
CARRIED_META = ("depth", "weblm_seed", "weblm_parent", "weblm_sitemap", "weblm_tdmrep", "retry_times",
                recrawl.META_KEY)
KNOWN_URLS = 200_000  # at most this many URLs in the local shortcut (~20 MB), then it starts over
REFUSED_REMEMBERED = 100_000  # links refused by known rules and recorded as not fetched: each once, then starts over
COUNTS_EVERY_S = 0.5  # cluster gauges (and the end-of-crawl test) at most this often while URLs flow
JOIN_WAIT_S = 60.0    # how long a worker started without seeds waits for work to appear in the frontier


@dataclass
class InHand:
    """A URL this worker holds: leased (to fetch) or held (fetched, record not yet durable)."""
    lease: Leased
    url: str
    meta: dict
    hot: bool   # a seed or a sitemap: fetched again after frontier.hot_recrawl_after_s, where new pages show first
    sent: bool = False
    record_id: str | None = None  # the WARC record of the fetch that finished it; its file's durability acks it
    observed: bool = False  # an answer changed its recrawl state (recrawl.py): its payload is rewritten at its ack
    new_capture: bool = False  # that answer was a 2xx: its record, once named, is what a later 304 refers to
    expires: float = 0.0  # when this worker's lease ends as far as it knows: the lease's expiry, then each renewal's

    def __post_init__(self):
        self.expires = self.expires or self.lease.expires


class FrontierScheduler(BaseScheduler):
    def __init__(self, crawler, backend: FrontierBackend | None = None):
        self.crawler = crawler
        self.cfg: CrawlConfig = crawler.settings["WEBLM_CRAWL_CONFIG"]
        self.stats = crawler.stats
        self.user_agent = self.cfg.user_agent
        self.canon = Canonicalizer(self.cfg.frontier.strip_params)
        self._backend = backend
        self._pool = ThreadPool(1, 1, name="frontier")  # one thread: operations apply in the order they were made
        self._ops: list[tuple[str, tuple]] = []
        self._adds: list[tuple[NewUrl, str]] = []      # (url, its politeness key) waiting for admission
        self._buffer: deque[InHand] = deque()          # leased, robots record known, not yet sent
        self._delayed: list[tuple[float, int, Request]] = []  # (not before, seq, request): robots hops, parked URLs
        self._seq = itertools.count()
        self._robots: dict[str, robotstxt.Robots] = {}  # host[:port] -> rules, until they expire
        self._robots_waiting: dict[str, list[InHand]] = defaultdict(list)  # host[:port] -> URLs waiting for them
        # host[:port] -> (its robots.txt record, the answer's URL, the URL asked) while its TDMRep file is asked
        self._tdm_asking: dict[str, tuple[RobotsRecord, str, str]] = {}
        self._in_hand: dict[str, InHand] = {}          # id -> leased or held by this worker
        self._held: set[str] = set()
        self._sent: set[str] = set()                  # ids sent to the downloader and not yet finished
        self._known: set[str] = set()  # URLs the backend said it has (admitted or seen): a local shortcut
        self._refused: set[str] = set()  # links refused by known rules that this worker has recorded as not fetched
        self._busy = False
        self._closing = False
        self._cluster: dict[str, int] = {}
        self._last_renew = 0.0
        self._flushed_idle = False
        self._again = False    # something happened while a tick was running: run another right after it
        self._kicked = False
        self._last_counts = 0.0
        self._opened = time.monotonic()
        self._saw_work = True
        self._loop: task.LoopingCall | None = None
        self._robots_in_flight: dict[str, Leased] = {}  # at close: robots key -> the lease whose host to release
        self.admission: Admission | None = None

    @classmethod
    def from_crawler(cls, crawler):
        scheduler = cls(crawler)
        crawler.signals.connect(scheduler._on_durable, signal=warc_file_durable)
        crawler.signals.connect(scheduler._on_fetch_finished, signal=fetch_finished)
        crawler.signals.connect(scheduler._on_fetch_recorded, signal=fetch_recorded)
        crawler.signals.connect(scheduler._on_fetch_failed, signal=fetch_failed)
        crawler.signals.connect(scheduler._on_engine_stopped, signal=signals.engine_stopped)
        return scheduler

    # --- Scrapy's scheduler interface ----------------------------------------------------------------
    def open(self, spider):
        self.spider = spider
        self._opened = time.monotonic()
        self._saw_work = bool(getattr(spider, "seeds", None))
        scope = list(getattr(spider, "scope_hosts", None) or getattr(spider, "allowed_domains", None) or [])
        self.admission = Admission(self.cfg, set(scope))
        # shared, by politeness key: a worker started without seeds keeps to the crawl's hosts
        self._op("scope_add", sorted({politeness_key(f"http://{h}/", self.cfg.frontier.politeness_key) for h in scope}))
        if self._backend is None:
            self._backend = open_backend(self.cfg, self.crawler.settings.get("WEBLM_LOCAL_DIR") or ".")
        self.crawler.weblm_digest_index = _DigestIndex(self._backend)
        self.crawler.weblm_known_urls = self._known  # the spider drops known links before they become Requests
        self._pool.start()
        self._loop = task.LoopingCall(self._tick)
        self._loop.start(self.cfg.frontier.refill_every_s, now=True)
        logger.info("frontier: %s (%s)", type(self._backend).__name__, self.cfg.frontier.url or "embedded")

    def close(self, reason):
        """Nothing new leaves; URLs leased but not sent go back to the frontier at once."""
        self._closing = True
        unsent = [item.lease.id for item in self._buffer]
        unsent += [item.lease.id for items in self._robots_waiting.values() for item in items]
        parked = [r.meta[LEASE_META] for _, _, r in self._delayed if r.meta.get(LEASE_META) in self._in_hand]
        unsent += parked
        # a host whose robots.txt is in flight is released at its answer
        hosts = {item.lease.host: item.lease for item in self._buffer}
        hosts.update((lease.host, lease) for lease in (self._in_hand[id_].lease for id_ in parked))
        self._robots_in_flight = {key: items[0].lease for key, items in self._robots_waiting.items() if items}
        for _, _, request in self._delayed:  # a robots.txt hop or TDMRep file parked: no answer will release its host
            lease = self._robots_in_flight.pop(request.meta.get(ROBOTS_META) or request.meta.get(TDMREP_META), None)
            if lease is not None:
                hosts[lease.host] = lease
        self._buffer.clear()
        self._robots_waiting.clear()
        self._delayed.clear()
        now = time.time()
        if unsent:
            self._op("requeue", unsent, now)
            for id_ in unsent:
                self._in_hand.pop(id_, None)
        for lease in hosts.values():  # one delay on: a parked URL's host has just answered its robots.txt
            self._release(lease, now + self.cfg.download_delay_s)
        logger.info("frontier: closing (%s): %d URL(s) handed back unsent", reason, len(unsent))

    def has_pending_requests(self) -> bool:
        if self._buffer or self._delayed or self._robots_waiting or self._adds or self._ops:
            return True
        if self._busy or self._kicked or self._again:  # a tick carries URLs and outcomes the counts do not show yet
            return True
        c = self._cluster
        others_held = max(0, c.get("held", 0) - len(self._held))
        if c.get("queued", 0) + c.get("leased", 0) + others_held or not c:
            self._saw_work = True
            return True
        # a worker started without seeds waits a while for the others to bring work, rather than end at once
        return not self._saw_work and time.monotonic() - self._opened < JOIN_WAIT_S

    def enqueue_request(self, request: Request) -> bool:
        if ROBOTS_META in request.meta or TDMREP_META in request.meta:  # a redirect hop: after the host's delay
            self._park(request, time.time() + self.cfg.download_delay_s)
            return True
        lease_id = request.meta.get(LEASE_META)
        if lease_id and lease_id in self._in_hand and self.canon.id(request.url) == lease_id:
            return self._retry(lease_id, request)
        request.meta.pop(LEASE_META, None)  # a redirect's new request copies its parent's meta
        if request.url in self._known:  # the Bloom filter has it: skip canonicalizing it again (menus, footers)
            self.stats.inc_value("weblm/filtered/seen")
            return False
        depth = int(request.meta.get("depth", 0))
        url = self.canon.strip(request.url)
        reason = self.admission.reason(url, depth)
        if reason is not None:
            self.stats.inc_value(f"weblm/filtered/{reason}")
            return False
        rules = self._robots.get(robots_key(url))
        # known rules (a host disallowed for a failed robots.txt is asked again later: its URLs are queued)
        if rules is not None and (rules.record.status != "disallow_all" or not self.cfg.obey_robots) \
                and self._rules_hold(rules, time.time()):
            refusal = self._refusal(rules, url)
            if refusal is not None:
                self.stats.inc_value(refusal)  # known rules: never queued, never leased
                if url not in self._refused:  # once per worker, not once per page that links to it (a footer link)
                    if len(self._refused) >= REFUSED_REMEMBERED:
                        self._refused.clear()
                    self._refused.add(url)
                    self._not_fetched(url, rules, refusal)
                return False
        key = self.canon.key(url)
        seed = bool(request.meta.get("weblm_seed"))
        priority = (self.cfg.frontier.seed_boost if seed else 0) - depth
        meta = {k: request.meta[k] for k in CARRIED_META if k in request.meta}
        payload = payload_of(url, meta)
        host = politeness_key(url, self.cfg.frontier.politeness_key)
        in_scope = self.admission.knows((urlsplit(url).hostname or "").lower())
        self._adds.append(NewUrl(key.hex(), host, url, priority, payload, url_hashes(key), in_scope))
        self._kick()
        return True

    def next_request(self) -> Request | None:
        if self._closing:
            return None
        now = time.time()
        while self._delayed and self._delayed[0][0] <= now:
            request = heapq.heappop(self._delayed)[2]
            item = self._in_hand.get(request.meta.get(LEASE_META))
            if item is None or not self._lapsed(item, now):
                return request
        while self._buffer:
            item = self._buffer.popleft()
            request = self._dispatch(item, now)
            if request is not None:
                return request
        return None

    def __len__(self) -> int:
        return len(self._buffer) + self._cluster.get("queued", 0)

    # --- the leased URL's way out --------------------------------------------------------------------
    def _dispatch(self, item: InHand, now: float) -> Request | None:
        if self._lapsed(item, now):
            return None
        key = robots_key(item.url)
        rules = self._robots.get(key)
        if not self.cfg.obey_robots and self.cfg.frontier.tdmrep != "respect":
            return self._send(item)
        if rules is None or not self._rules_hold(rules, now):
            waiting = self._robots_waiting[key]
            waiting.append(item)
            if len(waiting) == 1:
                if self.cfg.obey_robots:
                    return self._robots_request(key, item.url)
                self._ask_tdmrep_only(key, item.url, now)
            return None
        refusal = self._refusal(rules, item.url)
        if refusal is None:
            return self._send(item)
        self._deny(item, rules, now, refusal)
        self._release(item.lease, now)  # nothing was sent: the host's last fetch ended long enough ago
        return None

    def _rules_hold(self, rules: robotstxt.Robots, now: float) -> bool:
        """Whether the host's record says all this worker needs, unexpired: robots.txt asked if it obeys it, and with
        `respect` the TDMRep file asked with it (a record from before, or from a worker that did not ask, is asked
        again; a host robots.txt disallows needs no file)."""
        record = rules.record
        if record.expires <= now or (self.cfg.obey_robots and record.detail == ROBOTS_UNASKED):
            return False
        return self.cfg.frontier.tdmrep != "respect" or record.tdm is not None or (
            record.status == "disallow_all" and self.cfg.obey_robots)

    def _refusal(self, rules: robotstxt.Robots, url: str) -> str | None:
        """Why the URL is not fetched (the stat counted), or None: robots.txt disallows it, or (frontier.tdmrep:
        respect) the host's TDMRep file reserves text and data mining on it."""
        if self.cfg.obey_robots and not rules.allowed(url, self.user_agent):
            return "weblm/robots_denied"
        if self.cfg.frontier.tdmrep == "respect" and rules.reserved(url):
            return "weblm/tdmrep/reserved"
        return None

    def _deny(self, item: InHand, rules: robotstxt.Robots, now: float, refusal: str = "weblm/robots_denied") -> None:
        """robots.txt disallows the URL, or its host's TDMRep file reserves it (`refusal`): done unfetched, and it no
        longer counts against its host's budget; asked again when it is due for a recrawl."""
        self.stats.inc_value(refusal)
        self._not_fetched(item.url, rules, refusal)
        self._forget(item.lease.id)
        # a robots.txt that failed is asked again after its short TTL: the URL comes back with it
        refetch = rules.record.expires if rules.record.status == "disallow_all" else self._refetch_at(item, now)
        self._op("deny", [item.lease.id], refetch, now)

    def _not_fetched(self, url: str, rules: robotstxt.Robots, refusal: str) -> None:
        """Tell the WARC writer why `url` is not fetched (`url_not_fetched`: a lone metadata record)."""
        record = rules.record
        if refusal != "weblm/robots_denied":
            reason, detail = "tdmrep_reserved", "the host's tdmrep.json reserves text and data mining on it"
        elif record.status == "disallow_all":
            reason = "robots_denied"
            detail = f"robots.txt could not be read ({record.detail or 'no answer'}): the whole host is disallowed"
        else:
            reason, detail = "robots_denied", "robots.txt disallows it"
        logger.debug("%s: %s", detail, url)
        self.crawler.signals.send_catch_log(signal=url_not_fetched, url=url, reason=reason, detail=detail)

    def _send(self, item: InHand) -> Request:
        item.sent = True
        self._sent.add(item.lease.id)
        meta = {**item.meta, LEASE_META: item.lease.id, "download_slot": item.lease.host}
        headers = recrawl.conditional_headers(item.meta.get(recrawl.META_KEY)) if (
            self.cfg.frontier.conditional_recrawl) else {}
        if headers:
            self.stats.inc_value("weblm/recrawl/conditional")
        return Request(item.url, callback=self.spider.parse, errback=self.spider.on_error, meta=meta,
                       headers=headers, dont_filter=True)

    def _site_file_meta(self, url: str, **meta) -> dict:
        """A host's robots.txt or TDMRep file request: no retry, its non-2xx answers reach the errback with their
        response, any redirect followed up to robots_max_redirects (RFC 9309), in the host's download slot."""
        f = self.cfg.frontier
        return {**meta, "dont_retry": True, "allow_offsite": True, "redirect_ttl": f.robots_max_redirects,
                "download_slot": politeness_key(url, f.politeness_key),
                "download_maxsize": max(f.robots_max_bytes * 4, 2 ** 20)}

    @staticmethod
    def _past_redirects(failure) -> bool:
        """Whether a site file's fetch failed for more redirects than robots_max_redirects."""
        return "redirect" in failure.getErrorMessage().lower()

    def _robots_request(self, key: str, url: str) -> Request:
        parts = urlsplit(url)
        self.stats.inc_value("weblm/robots/fetches")
        return Request(f"{parts.scheme}://{parts.netloc}/robots.txt", callback=self._robots_answer,
                       errback=self._robots_failed, meta=self._site_file_meta(url, **{ROBOTS_META: key}),
                       dont_filter=True, priority=1000)

    def _robots_answer(self, response):
        f = self.cfg.frontier
        if 300 <= response.status < 400:  # a redirect RedirectMiddleware did not follow: past the hop limit
            record = robotstxt.from_error("redirect_limit", time.time(), f.robots_ttl_s, f.robots_error_ttl_s)
        else:
            record = robotstxt.from_answer(response.status, response.body, time.time(), f.robots_ttl_s,
                                           f.robots_error_ttl_s, f.robots_max_bytes)
        key, asked = response.meta[ROBOTS_META], (response.meta.get("redirect_urls") or [response.url])[0]
        if f.tdmrep == "respect" and record.status != "disallow_all" and not self._closing:
            self._ask_tdmrep(key, record, response.url, asked)
        else:
            self._robots_settled(key, record, response.url, asked)
        return []

    def _robots_settled(self, key: str, record: RobotsRecord, url: str, asked: str) -> None:
        """The host's record is complete: its URLs go on, its sitemaps (and with `archive` its TDMRep file) join the
        frontier.  `url`: where robots.txt answered from; `asked`: the robots.txt URL asked."""
        f = self.cfg.frontier
        self._robots_known(key, record)
        if record.status == "parsed" and f.sitemaps and not self._closing:
            self._enqueue_sitemaps(self._robots[key], url)
        if f.tdmrep == "archive" and record.status != "disallow_all" and not self._closing:
            self._enqueue_tdmrep(asked)

    def _enqueue_tdmrep(self, robots_url: str) -> None:
        """`frontier.tdmrep: archive`: the host's `/.well-known/tdmrep.json` joins the frontier like a sitemap: asked
        once per robots.txt fetch, the Bloom filter drops it once known, robots.txt applies.  It is archived, not acted
        on here: extract reads it from the lake into silver.documents.opt_out (tdmrep/), for this crawl's pages and any
        other WARC source's."""
        self.stats.inc_value("weblm/tdmrep/asked")
        self.enqueue_request(Request(urljoin(robots_url, tdmrep.WELL_KNOWN), meta={
            "depth": 1, "weblm_tdmrep": True, "weblm_parent": robots_url}))

    def _ask_tdmrep_only(self, key: str, url: str, now: float) -> None:
        """`obey_robots: false` with `respect`: the TDMRep file alone, at once (the lease found the host due), in a
        record that holds no robots.txt rules and says so, for as long as a robots.txt answer would hold."""
        self.stats.inc_value("weblm/robots/not_asked")
        record = RobotsRecord("allow_all", b"", now, now + self.cfg.frontier.robots_ttl_s, ROBOTS_UNASKED)
        self._ask_tdmrep(key, record, url, url, at=now)   # the page that made it asked is the file's parent

    def _ask_tdmrep(self, key: str, record: RobotsRecord, url: str, asked: str, at: float | None = None) -> None:
        """`frontier.tdmrep: respect`: the host's `/.well-known/tdmrep.json` (W3C TDMRep: site-wide
        text-and-data-mining reservations, which "a TDM Agent MUST check before it starts scraping") is asked right
        after its robots.txt, once the host's delay has passed; the host's URLs wait for both.  Its answer rides in
        the robots.txt record, for the whole cluster, and the pages it reserves are not fetched.  It is archived like
        any fetch, so the lake reads it too."""
        self._tdm_asking[key] = (record, url, asked)
        self.stats.inc_value("weblm/tdmrep/asked")
        next_at = at
        if next_at is None:   # after the robots.txt fetch, by the host's delay (its Crawl-delay included)
            waiting = self._robots_waiting.get(key)
            state = with_crawl_delay(self.cfg, waiting[0].lease.host_state if waiting else HostState(),
                                     robotstxt.parse(record).crawl_delay(self.user_agent))
            next_at, _ = after_fetch(self.cfg, state, time.time(), failed=False)
        meta = self._site_file_meta(asked, **{TDMREP_META: key, "weblm_parent": asked})
        self._park(Request(urljoin(asked, tdmrep.WELL_KNOWN), callback=self._tdmrep_answer,
                           errback=self._tdmrep_failed, meta=meta, dont_filter=True, priority=1000), next_at)

    def _tdmrep_answer(self, response):
        """A 2xx is the host's file (counted found, or invalid when it is not TDMRep's JSON array: then it declares
        nothing); a 4xx or too many redirects: the host declares nothing (absent); a 5xx or 429: nothing known
        (unreachable), so nothing is reserved and robots.txt and the file are asked again after robots_error_ttl_s."""
        f = self.cfg.frontier
        status = response.status
        if 200 <= status < 300:
            body = response.body[:f.robots_max_bytes]
            self.stats.inc_value(f"weblm/tdmrep/{'found' if tdmrep.declares(body) else 'invalid'}")
            reserved = tdmrep.reservations(body)
            if reserved:   # whom to ask for a licence: the lake's report lists them too
                policies = sorted({policy for _, policy in reserved if policy})
                logger.info("tdmrep.json for %s reserves text and data mining on %s; licence policy: %s",
                            response.meta[TDMREP_META], ", ".join(loc for loc, _ in reserved[:10]),
                            ", ".join(policies[:5]) or "none given")
            self._tdm_settled(response.meta[TDMREP_META], body)
        elif status == 429 or status >= 500:
            self._tdm_settled(response.meta[TDMREP_META], None, f"HTTP {status}")
        else:
            self.stats.inc_value("weblm/tdmrep/absent")
            self._tdm_settled(response.meta[TDMREP_META], b"")
        return []

    def _tdmrep_failed(self, failure):
        from spider.errors import failure_kind
        response = getattr(failure.value, "response", None)
        if response is not None:
            return self._tdmrep_answer(response)
        if self._past_redirects(failure):   # no file where it belongs
            self.stats.inc_value("weblm/tdmrep/absent")
            return self._tdm_settled(failure.request.meta[TDMREP_META], b"")
        self._tdm_settled(failure.request.meta[TDMREP_META], None,
                          f"{failure_kind(failure)}: {failure.getErrorMessage()[:300]}")

    def _tdm_settled(self, key: str, body: bytes | None, error: str = "") -> None:
        """The file's answer joins the host's robots.txt record (`body` None: it could not be read)."""
        if key not in self._tdm_asking:   # an earlier ask's answer settled the host already
            return
        record, url, asked = self._tdm_asking.pop(key)
        if body is None:
            self.stats.inc_value("weblm/tdmrep/unreachable")
            expires = min(record.expires, time.time() + self.cfg.frontier.robots_error_ttl_s)
            logger.warning("tdmrep.json for %s could not be read (%s): nothing reserved for now; asked again at %s",
                           key, error, time.strftime("%H:%M:%S", time.localtime(expires)))
            record, body = replace(record, expires=expires), b""
        self._robots_settled(key, replace(record, tdm=body), url, asked)

    def _enqueue_sitemaps(self, rules: robotstxt.Robots, robots_url: str) -> None:
        """robots.txt's `Sitemap:` lines (sitemaps.org) join the frontier as URLs one hop from the host, marked so
        that the spider reads them as sitemaps (WebSpider.parse_sitemap).  Asked once per robots.txt fetch, so once
        per host and `robots_ttl_s` for the whole cluster; the Bloom filter drops the ones already known."""
        for url in dict.fromkeys(rules.sitemaps()):
            self.stats.inc_value("weblm/sitemaps/listed")
            self.enqueue_request(Request(urljoin(robots_url, url), meta={
                "depth": 1, "weblm_sitemap": True, "weblm_parent": robots_url}))

    def _robots_failed(self, failure):
        from spider.errors import failure_kind
        f = self.cfg.frontier
        request = failure.request
        response = getattr(failure.value, "response", None)
        if response is not None:
            return self._robots_answer(response)
        kind = failure_kind(failure)
        if self._past_redirects(failure):
            kind = "redirect_limit"
        detail = kind if kind == "redirect_limit" else f"{kind}: {failure.getErrorMessage()[:300]}"
        record = robotstxt.from_error(kind, time.time(), f.robots_ttl_s, f.robots_error_ttl_s)
        self._robots_known(request.meta[ROBOTS_META], replace(record, detail=detail))

    def _robots_known(self, host: str, record) -> None:
        """`host` is the robots key (host[:port]) the answer is for; the URLs waiting for it come next."""
        now = time.time()
        self._op("robots_put", host, record)
        rules = robotstxt.parse(record)
        self._robots[host] = rules
        if record.detail != ROBOTS_UNASKED:
            self.stats.inc_value(f"weblm/robots/{record.status}")
        if record.status == "disallow_all":
            logger.warning("robots.txt for %s %s: host disallowed, asked again at %s (RFC 9309 §2.3.1.4)", host,
                           f"answered {record.detail}" if record.detail.startswith("HTTP") else
                           f"could not be fetched ({record.detail})",
                           time.strftime("%H:%M:%S", time.localtime(record.expires)))
        elif record.detail == "redirect_limit":
            logger.warning("robots.txt for %s redirects more than %d times: read as unavailable, no rules "
                           "(RFC 9309 §2.3.1.2)", host, self.cfg.frontier.robots_max_redirects)
        waiting = self._robots_waiting.pop(host, [])
        if self._closing:  # close() handed the URLs back; the host is free once this answer is in
            lease = self._robots_in_flight.pop(host, None)
            if lease is not None:
                self._release(lease, now + self.cfg.download_delay_s)
            return
        if not waiting:
            return
        state = waiting[0].lease.host_state if waiting else HostState()
        asked = rules.crawl_delay(self.user_agent)
        state = with_crawl_delay(self.cfg, state, asked)
        if state.delay_s > 0:
            self.stats.inc_value("weblm/robots/crawl_delay_hosts")
            if asked > self.cfg.max_crawl_delay_s:
                logger.warning("robots.txt for %s asks for Crawl-delay %.1f s; capped at crawl.max_crawl_delay_s="
                               "%.1f s", host, asked, self.cfg.max_crawl_delay_s)
        next_at, state = after_fetch(self.cfg, state, now, failed=False)
        for item in waiting:
            item.lease = replace(item.lease, host_state=state)
        refusals = [self._refusal(rules, item.url) for item in waiting]
        allowed = [item for item, refusal in zip(waiting, refusals) if refusal is None]
        for item, refusal in zip(waiting, refusals):
            if refusal is not None:
                self._deny(item, rules, now, refusal)
        if allowed:
            # the robots.txt fetch was a request to the host: its URL waits out the delay
            self._park(self._send(allowed[0]), next_at)
            if len(allowed) > 1:
                self._op("requeue", [i.lease.id for i in allowed[1:]], now)
                for i in allowed[1:]:
                    self._forget(i.lease.id)
        else:
            self._release(waiting[0].lease, next_at, state)

    def _park(self, request: Request, not_before: float) -> None:
        heapq.heappush(self._delayed, (not_before, next(self._seq), request))
        _reactor().callLater(max(0.0, not_before - time.time()), self._wake_engine)

    # --- fetch outcomes (FetchOutcomeMiddleware, the spider's errback, the WARC writer) ---------------
    def _on_fetch_finished(self, request: Request, failed: bool, blocked_until: float = 0.0, response=None) -> None:
        lease_id = request.meta.get(LEASE_META)
        item = self._in_hand.get(lease_id) if lease_id else None
        if item is None:
            return
        if response is not None:
            self._observe(item, response)
        now = time.time()
        next_at, state = after_fetch(self.cfg, item.lease.host_state, now, failed, blocked_until)
        item.lease = replace(item.lease, host_state=state)
        self._sent.discard(lease_id)
        self._held.add(lease_id)
        item.record_id = None  # WarcCaptureMiddleware (950) names the record next, in the same response chain
        self._op("fetched", [lease_id], now + self.cfg.frontier.lease_s)
        self._release(item.lease, next_at, state)
        self._kick()
        # once the host is due, at a random point of the refill period: no head start over the other workers
        _reactor().callLater(max(0.0, next_at - now) + random.uniform(0, self.cfg.frontier.refill_every_s), self._kick)

    def _observe(self, item: InHand, response) -> None:
        """What this answer says of the page's content: its validators and interval for the next fetch (recrawl.py),
        written into its payload when its record is durable."""
        f = self.cfg.frontier
        if not (f.conditional_recrawl or f.adaptive_recrawl):
            return
        headers = {name: response.headers[name].decode("latin-1") for name in ("ETag", "Last-Modified")
                   if response.headers.get(name)}
        state = recrawl.observe(item.meta.get(recrawl.META_KEY), response.status,
                                {k.lower(): v for k, v in headers.items()}, response.body, self._first_interval(item),
                                f)
        if state is None:
            return
        if response.status == 304:
            self.stats.inc_value("weblm/recrawl/not_modified")
        elif recrawl.META_KEY in item.meta:
            self.stats.inc_value(f"weblm/recrawl/{'changed' if state['changed'] else 'unchanged'}")
        state.pop("changed")
        item.meta[recrawl.META_KEY] = state
        item.observed = True
        item.new_capture = response.status != 304

    def _on_fetch_failed(self, request: Request) -> None:
        """Failed for good with nothing recorded (network error after retries): done until the error recrawl."""
        lease_id = request.meta.get(LEASE_META)
        item = self._forget(lease_id) if lease_id else None
        if item is not None:
            now = time.time()
            self._op("ack", [lease_id], now + self.cfg.frontier.error_recrawl_after_s, now)

    def _retry(self, lease_id: str, request: Request) -> bool:
        item = self._forget(lease_id)
        meta = {k: request.meta[k] for k in CARRIED_META if k in request.meta}
        self._op("requeue", [lease_id], time.time(), {lease_id: payload_of(item.url, meta)})
        self.stats.inc_value("weblm/frontier/retries_requeued")
        return True

    def _on_fetch_recorded(self, request: Request, record_id: str, date: str | None = None) -> None:
        lease_id = request.meta.get(LEASE_META)
        item = self._in_hand.get(lease_id) if lease_id in self._held else None
        if item is not None:
            item.record_id = record_id
            if item.new_capture and date:   # the capture a 304 to the next recrawl's validators refers to
                item.meta[recrawl.META_KEY][recrawl.CAPTURE] = recrawl.capture(date, record_id, request.url, item.url)
                item.new_capture = False

    def _on_durable(self, warc: DurableWarc) -> None:
        """The fetches recorded in a file now durable are done: a URL is acknowledged only through the record of
        the fetch that finished it here, which this worker still holds.  Any other record of the URL may be a 429
        or 503 answer whose URL went back to the frontier as a retry: acknowledging it there would end the URL
        while another worker has it leased for that retry (two refusals, then no third request: a page lost in
        tests/spider/test_crawl_hostile.py), or, when this worker leased the retry itself, before the file that
        holds its answer is durable.  A fetch never recorded (the writer stopped) is never acknowledged: its hold
        expires and it is fetched again.  A recovered file's URLs are acknowledged all, whoever holds them now:
        the process that fetched them is gone."""
        now = time.time()
        by_refetch: dict[float | None, list[str]] = defaultdict(list)
        payloads: dict[str, str] = {}
        for url, record_id in zip(warc.urls, warc.record_ids):
            id_ = self.canon.id(url)
            if not warc.recovered:
                held = self._in_hand.get(id_) if id_ in self._held else None
                if held is None or held.record_id != record_id:
                    continue
            item = self._forget(id_)
            if item is not None and item.observed:   # its validators and interval travel with it to its recrawl
                payloads[id_] = payload_of(item.url, {k: item.meta[k] for k in CARRIED_META if k in item.meta})
            by_refetch[self._refetch_at(item, now)].append(id_)
        if payloads:   # held by this worker until the ack below: a payload-only requeue of none
            self._op("requeue", [], now, payloads)
        for refetch, ids in by_refetch.items():
            self._op("ack", ids, refetch, now, warc.recovered)

    def _first_interval(self, item: InHand | None) -> float:
        f = self.cfg.frontier
        return f.hot_recrawl_after_s if item is not None and item.hot else f.recrawl_after_s

    def _refetch_at(self, item: InHand | None, now: float) -> float | None:
        first = self._first_interval(item)
        if first <= 0:
            return None
        if item is None or not self.cfg.frontier.adaptive_recrawl:
            return now + first
        return now + recrawl.interval_of(item.meta.get(recrawl.META_KEY), first)

    def _forget(self, id_: str) -> InHand | None:
        self._held.discard(id_)
        self._sent.discard(id_)
        return self._in_hand.pop(id_, None)

    # --- the background thread -----------------------------------------------------------------------
    def _op(self, name: str, *args: Any) -> None:
        self._ops.append((name, args))

    def _release(self, lease: Leased, next_at: float, state: HostState | None = None) -> None:
        """The lease's host may be asked again at `next_at`; the release names the lease it ends, so a lapsed one
        cannot free the host from a newer lease (FrontierBackend.release_host)."""
        self._op("release_host", lease.host, next_at, state, lease.host_lease)

    def _kick(self) -> None:
        """Tick as soon as the thread is free: a released host or new URLs should not wait for the timer."""
        if self._busy:
            self._again = True
        elif self._backend is not None and not self._kicked:
            self._kicked = True
            _reactor().callLater(0, self._tick)

    def _tick(self) -> None:
        self._kicked = False
        if self._busy or self._backend is None:
            self._again = self._busy
            return
        now = time.time()
        ops, self._ops = self._ops, []
        adds, self._adds = self._adds, []
        # no more than the downloader has room for: a worker does not sit on hosts others could fetch now
        room = min(self.cfg.frontier.buffer, self.cfg.concurrent_requests - len(self._sent))
        want = 0 if self._closing else max(0, room - len(self._buffer) - len(self._delayed))
        renew: list[str] = []
        if now - self._last_renew >= self.cfg.frontier.renew_every_s:
            renew, self._last_renew = list(self._in_hand), now
        self._busy = True
        d = deferToThreadPool(_reactor(), self._pool, self._apply, ops, adds, want, renew, now)
        d.addCallbacks(self._applied, self._failed)

    def _apply(self, ops, adds, want: int, renew: list[str], now: float):
        """Runs on the frontier thread: the only place the backend is called (except the digest index).  One batch
        (one SQLite transaction); if it fails, nothing of it happened and everything is tried again next tick."""
        b = self._backend
        try:
            with b.batch():
                return self._apply_in_batch(ops, adds, want, renew, now)
        except Exception as exc:
            if not b.atomic_batches:
                raise
            cause = exc.__cause__ if isinstance(exc, _Unapplied) else exc
            raise _Unapplied(ops, adds) from cause

    def _apply_in_batch(self, ops, adds, want: int, renew: list[str], now: float):
        b = self._backend
        f = self.cfg.frontier
        try:
            outcomes, leased = b.step(adds, ops, want, now, f.lease_s, self.cfg.max_pages_per_host)
        except Unapplied as exc:  # applied in order: the rest waits for the next tick
            admitted = exc.outcomes is not None
            raise _Unapplied(ops[exc.done:], [] if admitted else adds, (exc.outcomes, adds) if admitted else None) \
                from exc.__cause__
        renewed = None
        if renew:  # after the lease: a lease due for renewal is still far from expiry (renew_every_s < lease_s)
            try:
                renewed = (renew, set(b.renew(renew, now + f.lease_s)), now + f.lease_s)
            except Exception as exc:  # noqa: BLE001  (what was leased and applied stands)
                logger.warning("frontier: renewing %d lease(s) failed (%s: %s); tried again in %.0f s", len(renew),
                               type(exc).__name__, exc, f.renew_every_s)
        keys = {robots_key(json.loads(item.payload)["url"]) for item in leased}
        robots = {key: b.robots_get(key) for key in keys if key not in self._robots}
        counts = None
        if now - self._last_counts >= COUNTS_EVERY_S or not leased:
            counts, self._last_counts = b.counts(now), now
        return outcomes, leased, robots, counts, adds, renewed

    def _applied(self, result) -> None:
        self._busy = False
        if self._again:
            self._again = False
            self._kick()
        outcomes, leased, robots, counts, adds, renewed = result
        if renewed is not None:
            self._renewed(*renewed)
        self._count(outcomes, adds)
        now = time.time()
        for key, record in robots.items():
            if record is not None and record.expires > now:
                self._robots[key] = robotstxt.parse(record)
        for lease in leased:
            data = json.loads(lease.payload)
            meta = data.get("meta", {})
            item = InHand(lease, data["url"], meta, bool(meta.get("weblm_seed") or meta.get("weblm_sitemap")))
            self._in_hand[lease.id] = item
            if self._closing:
                self._op("requeue", [lease.id], now)
                self._release(lease, now)
                self._forget(lease.id)
            else:
                self._buffer.append(item)
        if counts is not None:
            self._cluster = counts
            for name, value in counts.items():
                self.stats.set_value(f"weblm/frontier/{name}", value)
            self._maybe_flush(counts)
        self.stats.set_value("weblm/frontier/in_hand", len(self._in_hand))
        if leased or not self.has_pending_requests():
            self._wake_engine()  # new work, or the end: either way the engine should look now

    def _count(self, outcomes: list[str], adds: list[NewUrl]) -> None:
        if len(self._known) > KNOWN_URLS:
            self._known.clear()
        for outcome, new in zip(outcomes, adds):
            if outcome != "admitted":
                self.stats.inc_value(f"weblm/filtered/{outcome}")
            else:
                self.stats.inc_value("weblm/frontier/admitted")
            if outcome in ("admitted", "seen"):  # never admitted again; other refusals may change their minds
                self._known.add(new.url)

    def _renewed(self, asked: list[str], renewed: set[str], until: float) -> None:
        """A renewal's answer: the leases renewed run to `until`; the rest are no longer this worker's."""
        lost = 0
        for id_ in asked:
            item = self._in_hand.get(id_)
            if item is None:
                continue
            if id_ in renewed:
                item.expires = max(item.expires, until)
            elif item.expires > 0:
                item.expires, lost = 0.0, lost + 1
        if lost:
            self.stats.inc_value("weblm/frontier/leases_lost", lost)
            logger.warning("frontier: %d lease(s) expired before this worker renewed them (it stalled longer than "
                           "frontier.lease_s?): their URLs went back to the frontier; the unsent ones are dropped "
                           "here", lost)

    def _lapsed(self, item: InHand, now: float) -> bool:
        """A URL whose lease this worker no longer holds is not sent: another worker may have it, and its host.
        It is handed back (a no-op where another worker holds it now) and so is its host (nothing was sent)."""
        if item.expires > now:
            return False
        self.stats.inc_value("weblm/frontier/lapsed_unsent")
        self._forget(item.lease.id)
        self._op("requeue", [item.lease.id], now)
        self._release(item.lease, now)
        return True

    def _wake_engine(self) -> None:
        """The engine asks for requests after each download and on a 5 s heartbeat; new work should not wait
        for it (Frontera's scheduler does the same)."""
        engine = self.crawler.engine
        if engine is not None and getattr(engine, "_slot", None) is not None:
            engine._slot.nextcall.schedule()

    def _maybe_flush(self, counts: dict[str, int]) -> None:
        """Nothing left to fetch here but URLs held for their records: close the WARC file so they are acked."""
        idle = not (self._buffer or self._delayed or self._robots_waiting or self._adds) \
            and counts.get("queued", 0) + counts.get("leased", 0) == 0
        if idle and self._held and not self._flushed_idle:
            self._flushed_idle = True
            self.crawler.signals.send_catch_log(signal=warc_flush_requested)
        elif not idle:
            self._flushed_idle = False

    def _failed(self, failure) -> None:
        self._busy = False
        self.stats.inc_value("weblm/errors/frontier_backend")
        cause = failure.value
        if isinstance(cause, _Unapplied):
            self._ops[:0] = cause.ops
            self._adds[:0] = cause.adds
            if cause.admitted is not None:  # the URLs were admitted before the failure
                self._count(*cause.admitted)
            cause = cause.__cause__
        logger.error("frontier backend call failed (%s: %s); %d operation(s) kept for the next tick",
                     type(cause).__name__, cause, len(self._ops))

    def _on_engine_stopped(self) -> None:
        """The last acknowledgements (WARC files closed at spider_closed) reach the backend before it closes."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        backend = self._backend
        if backend is None:
            return
        for lease in self._robots_in_flight.values():  # never answered before the engine stopped
            self._release(lease, time.time() + self.cfg.download_delay_s)
        ops, self._ops = self._ops, []
        adds, self._adds = self._adds, []
        try:
            if self._pool.started:
                self._pool.stop()  # waits for a tick in flight
            self._apply(ops, adds, 0, [], time.time())
        except Exception as exc:  # noqa: BLE001  (the URLs come back when their leases expire)
            logger.error("frontier: could not apply the last %d operation(s): %s; their URLs come back after "
                         "frontier.lease_s", len(ops), exc)
        backend.close()


def payload_of(url: str, meta: dict) -> str:
    """A URL's record in the frontier: its URL and the request meta it carries, as compact JSON (it is kept for every
    URL the frontier knows, until its recrawl)."""
    return json.dumps({"url": url, "meta": meta}, separators=(",", ":"))


def robots_key(url: str) -> str:
    """What one robots.txt covers: the URL's host and port (RFC 9309 §2.3; http and https share it here), without
    credentials or a default port (`http://a.test:80/` is `http://a.test/`: its robots.txt is not asked twice)."""
    return urlsplit(without_default_port(url)).netloc.rpartition("@")[2].lower()


def _reactor():
    """The running reactor, imported late: importing it at module level would install Twisted's default reactor
    before Scrapy installs the asyncio one (TWISTED_REACTOR)."""
    from twisted.internet import reactor
    return reactor


class _Unapplied(Exception):
    """What a failed tick did not apply, handed back to be applied first on the next one."""

    def __init__(self, ops: list, adds: list, admitted: tuple | None = None):
        super().__init__(f"{len(ops)} operation(s), {len(adds)} URL(s) not applied")
        self.ops, self.adds, self.admitted = ops, adds, admitted  # admitted: (outcomes, URLs) that went in


class _DigestIndex:
    """The WARC writer's view of the frontier's payload-digest index (called from the writer thread)."""

    def __init__(self, backend: FrontierBackend):
        self.backend = backend

    def firsts(self, items):
        return self.backend.digest_firsts(items)
