"""The frontier's storage contract: one interface, two implementations (Redis, embedded SQLite).

A backend keeps *where* URLs are; the scheduler (spider/frontier/scheduler.py) decides *what* to crawl
and *when* a host may be asked again.  Every method is synchronous and called from the scheduler's one
background thread, never from the reactor.  Every multi-step change is atomic (a Lua script on Redis, a
transaction on SQLite), so any number of workers may share one backend.

The life of a URL (tests/spider/frontier/contract.py pins every arrow down for both backends):

    add() ──admitted──▶ queued ──lease()──▶ leased ──fetched()──▶ held ──ack()──▶ done (or due, to recrawl)
                          ▲                   │                     │                       │
                          └──── requeue() ────┘                     │     due time passed   │
                          ▲                                         │   (lease() moves it)  │
                          └──── lease expired (reap) ───────────────┴───────────────────────┘

A host is *idle* (nothing queued), *waiting* (queued, next-allowed time not yet come), *ready*, or *busy*
(one of its URLs is leased and not yet released).  lease() hands out at most one URL per ready host and makes
the host busy; release_host() makes it waiting again until the time the caller computed (politeness).  A busy
host whose worker died becomes ready again when the lease expires.  So two workers never fetch from one host
at once, and the gap between two fetches is what the releasing worker asked for.

Every backend instance is one *owner* (a worker process; `new_owner()`), and a lease belongs to the owner that took
it: fetched(), renew(), requeue(), ack() and release_host() change only the caller's own leases, holds and busy
hosts.  A worker that stalled past its lease (a long GC pause, a network partition from the store) and wakes up
after another worker leased the URL again therefore cannot end, requeue or extend that lease, nor free the host
while the other fetch runs.  The one exception is ack(anyone=True): a WARC file left by a dead process and
recovered by another is durable whoever holds its URLs now.  A host's leases are numbered (`Leased.host_lease`), and
a release names the lease it ends: so even the same worker, which leased a host again after its first lease of it
lapsed, cannot end the new lease with the old one's release, and which of two fetches was the later one is known
exactly, whatever the workers' clocks say.
Not scrapy-redis (its queue pops a request for good: no lease, no shared host delay) nor Frontera (last release 2019).
"""
from __future__ import annotations

import os
import socket
import uuid
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NewUrl:
    """A URL offered to the frontier; the scheduler has already canonicalized it and run the trap rules."""
    id: str            # fingerprint of the canonical URL (spider/frontier/canonical.py), 32 hex chars
    host: str          # politeness key (the hostname by default; the registered domain by configuration)
    url: str           # the URL to fetch
    priority: int      # higher first within a host (breadth-first: minus the depth)
    payload: str       # what the scheduler needs to rebuild the request (JSON), opaque to the backend
    bloom: tuple[int, int, int, int]  # four 26-bit hashes of the canonical URL (spider/frontier/bloom.py)
    in_scope: bool = True  # False: the worker does not know the host; the backend checks the crawl's scope


@dataclass(frozen=True)
class HostState:
    """The politeness record of a host, shared by the whole cluster."""
    delay_s: float = -1.0      # effective delay (config, or robots.txt Crawl-delay capped); < 0: not set yet
    errors: int = 0            # consecutive failed fetches (exponential backoff)
    blocked_until: float = 0.0  # Retry-After: nothing before this time
    admitted: int = 0          # URLs admitted for this host (the per-host budget counts these)


@dataclass(frozen=True)
class Leased:
    """A URL handed to one worker, with its host's state at lease time."""
    id: str
    host: str
    payload: str
    expires: float
    host_state: HostState = field(default_factory=HostState)
    host_lease: int = 0  # the host's leases so far, this one included: release_host() names the lease it ends


@dataclass(frozen=True)
class RobotsRecord:
    """A host's robots.txt as the cluster cached it (RFC 9309)."""
    status: str        # "parsed" (2xx), "allow_all" (4xx), "disallow_all" (5xx, 429, unreachable)
    body: bytes        # the robots.txt body for "parsed" (at most the size the scheduler keeps), else b""
    fetched_at: float
    expires: float     # refetch after this (24 h for answers, a short error TTL for failures)
    detail: str = ""   # e.g. "HTTP 503" or "TimeoutError", for logs and metrics
    # the host's /.well-known/tdmrep.json asked with it (frontier.tdmrep: respect): a 200's body (at most
    # robots_max_bytes), b"" when the host declares nothing or the file could not be read; None: not asked
    tdm: bytes | None = None


@dataclass(frozen=True)
class DigestSeen:
    """The first capture of a payload digest (for WARC revisit records)."""
    url: str
    date: str          # WARC-Date of the original
    record_id: str     # its WARC-Record-ID


@dataclass(frozen=True)
class UrlPlace:
    """Where one URL stands in the frontier (`FrontierBackend.where`), for `python -m spider.lookup`."""
    state: str | None           # queued, leased, held (fetched, its WARC record not yet durable), due (a recrawl);
    #                             None: no entry (never admitted, or done: fetched or refused, and no recrawl due)
    until: float | None = None  # leased or held: when that ends; due: when it is queued again
    owner: str | None = None    # the worker whose lease or hold it is
    ahead: int | None = None    # queued: URLs of its host queued before it
    seen: bool = False          # the URL Bloom filter holds it: admitted once (or a false positive, at its FP rate)
    in_scope: bool = False      # its host is in the crawl's scope (links may be followed into it)
    host_next: float | None = None  # its host's next allowed fetch, while the host has URLs queued and none in flight
    host_busy: bool = False     # a fetch of its host is in flight


class Unapplied(Exception):
    """`FrontierBackend.apply` or `step` failed: the first `done` operations are applied, and the URLs when
    `outcomes` (`add`'s answer for them) is not None; the cause is chained."""

    def __init__(self, done: int, outcomes: list[str] | None = None):
        super().__init__(f"applied {done} operation(s), then failed")
        self.done, self.outcomes = done, outcomes


def new_owner() -> str:
    """A lease owner's name: unique to this backend instance, readable in the store (host, pid, random part)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class FrontierBackend(ABC):
    """Storage for the crawl frontier.  Times are UNIX seconds (float) passed in by the caller, so tests can
    drive the clock; a backend never reads the clock itself.  `owner` names this instance's leases."""

    owner: str
    atomic_batches = False  # True: a batch() is all or nothing (a failure inside undoes every operation in it)

    def batch(self) -> AbstractContextManager:
        """The operations called inside apply as one unit where the store allows it (one SQLite transaction:
        one commit per scheduler tick instead of one per operation).  Default: each operation on its own."""
        return nullcontext()

    def apply(self, ops: list[tuple[str, tuple]]) -> None:
        """Operations whose answers nobody waits for, as (method name, arguments), applied in order.  On a failure
        it raises `Unapplied(done)` from the cause: the first `done` operations are applied, the rest may not be.
        Default: one call each; a store with round trips sends them together (the Redis frontier)."""
        for done, (name, args) in enumerate(ops):
            try:
                getattr(self, name)(*args)
            except Exception as exc:
                raise Unapplied(done) from exc

    def step(self, adds: list[NewUrl], ops: list[tuple[str, tuple]], max_urls: int, now: float, lease_s: float,
             max_per_host: int) -> tuple[list[str], list[Leased]]:
        """A scheduler tick: `add(adds)`, `apply(ops)`, then `lease(max_urls)` (none when 0); answers add's
        outcomes and the leases.  It raises `Unapplied` with the operations applied before the failure, and
        `outcomes` None where the URLs may not be admitted."""
        try:
            outcomes = self.add(adds, now, max_per_host) if adds else []
        except Exception as exc:
            raise Unapplied(0) from exc
        try:
            self.apply(ops)
        except Unapplied as exc:
            raise Unapplied(exc.done, outcomes) from exc.__cause__
        return outcomes, (self.lease(max_urls, now, lease_s) if max_urls else [])

    # --- admission -------------------------------------------------------------------------------------
    @abstractmethod
    def add(self, urls: list[NewUrl], now: float, max_per_host: int) -> list[str]:
        """Admit each URL at most once: an atomic Bloom test-and-set per URL.  Returns one outcome per URL, in
        order: "admitted" (queued; counts against its host's budget), "seen" (the Bloom filter has it: never
        admitted again, except by recrawl), "offsite" (`in_scope` is False and the host is not in the crawl's
        scope; not marked seen) or "host_budget" (its host already has `max_per_host` admitted URLs;
        *not* marked seen, so a budget raised later admits it).  `max_per_host` <= 0: no budget.  An idle host
        that gets a URL becomes waiting until its stored next-allowed time, or ready now if it has none."""

    # --- handing out work ------------------------------------------------------------------------------
    @abstractmethod
    def lease(self, max_urls: int, now: float, lease_s: float) -> list[Leased]:
        """At most `max_urls` URLs, at most one per ready host (next-allowed time <= now), highest priority
        first within a host and first-in first-out among equals; hosts that waited longest first.  Each URL is
        leased until `now + lease_s` and its host becomes busy until then.  Before handing out, expired leases
        and held URLs are put back in their queues (their hosts become ready) and recrawls due by `now` are
        queued again."""

    @abstractmethod
    def release_host(self, host: str, next_at: float, state: HostState | None = None,
                     host_lease: int | None = None) -> bool:
        """The host's fetch is over: it may be asked again at `next_at`; `state` (delay, errors, Retry-After
        block) replaces its stored politeness record when given.  Idle again if nothing is queued for it.
        `host_lease` is the `Leased.host_lease` of the lease this ends.  A host busy with another lease is left
        alone (returns False): the caller's lease of it lapsed and the host was leased again.  A host nobody holds
        (the caller's lease lapsed) keeps its next-allowed time where that is later than `next_at`, and keeps its
        politeness record when it was leased since: the late release of a lapsed lease must not cut short the
        delay of a fetch another worker made from the host since, nor replace what that fetch recorded.
        Without `host_lease` (a caller that does not know the lease), a busy host is the caller's if its owner
        holds it, and a record is replaced only with the later next-allowed time: right unless the workers'
        clocks disagree by more than a host's delay."""

    @abstractmethod
    def requeue(self, ids: list[str], now: float, payloads: dict[str, str] | None = None) -> None:
        """Give leased or held URLs back (a retry, a worker closing with work in hand): queued again under their
        original priority, ahead of URLs admitted after them.  `payloads` replaces the payload of some of them (a
        retry's count travels with its URL).  Unknown or already acknowledged ids, and those another owner holds,
        are ignored."""

    @abstractmethod
    def fetched(self, ids: list[str], until: float) -> None:
        """The fetches ended and their records wait to become durable: leased → held until `until`.  A held URL
        no longer keeps the crawl from ending (pending() leaves it out) but comes back if not acknowledged
        before `until`."""

    @abstractmethod
    def renew(self, ids: list[str], until: float) -> list[str]:
        """Extend leases and holds that this worker still has in hand (a live worker renews; a dead one does
        not, so its URLs come back soon after it dies).  Returns the ids renewed: the others are no longer this
        owner's (their lease expired while the worker stalled, and they went back to the frontier)."""

    @abstractmethod
    def ack(self, ids: list[str], refetch_at: float | None, now: float, anyone: bool = False) -> int:
        """Their records are durable (or there was nothing to record: robots.txt denied it, the fetch failed for
        good): done.  With `refetch_at`, the URL comes back in its queue then (recrawl); None forgets it (the
        Bloom filter still has it).  Only this owner's leased or held URLs are acknowledged (`anyone`: whoever
        holds them, for a recovered file); an id queued again meanwhile (a retry) is left alone.  Idempotent.
        Returns how many were acknowledged now."""

    @abstractmethod
    def deny(self, ids: list[str], refetch_at: float | None, now: float) -> int:
        """`ack` of URLs that robots.txt denied: done unfetched, and each no longer counts against its host's
        budget.  One step, so idempotent as `ack` is: a repeated deny finds nothing to acknowledge and refunds
        nothing (a refund of its own, applied again after a lost answer, gave its host a page more).  Returns how
        many were acknowledged now."""

    # --- the crawl's scope ----------------------------------------------------------------------------
    @abstractmethod
    def scope_add(self, hosts: list[str]) -> None:
        """Hosts this crawl may follow links into (the seeds' hosts, `crawl.allowed_hosts`), for every worker:
        one started without seeds joins the crawl and keeps to its scope."""

    @abstractmethod
    def scope(self) -> set[str]:
        """Every host added to the scope so far."""

    @abstractmethod
    def where(self, url: NewUrl) -> UrlPlace:
        """Where `url` (its id, host and Bloom hashes) stands, read only."""

    # --- politeness and robots.txt, cluster-wide -------------------------------------------------------
    @abstractmethod
    def host_state(self, host: str) -> HostState:
        """The stored politeness record (defaults for an unknown host)."""

    @abstractmethod
    def robots_get(self, host: str) -> RobotsRecord | None:
        """The cached robots.txt record of a host, expired or not (the caller checks `expires`)."""

    @abstractmethod
    def robots_put(self, host: str, record: RobotsRecord) -> None:
        """Cache a host's robots.txt for the whole cluster."""

    # --- WARC revisit records --------------------------------------------------------------------------
    @abstractmethod
    def digest_firsts(self, items: list[tuple[str, DigestSeen]]) -> list[DigestSeen | None]:
        """Atomic test-and-set on payload digests, for each (digest, first) in order: None where the digest is new
        (and `first` is now stored), else the capture stored first.  One round trip for all of them."""

    # --- observing -------------------------------------------------------------------------------------
    @abstractmethod
    def pending(self, now: float) -> int:
        """URLs that keep a crawl from ending: queued (ready or waiting) plus leased.  Held and done URLs and
        recrawls due later do not count."""

    @abstractmethod
    def counts(self, now: float) -> dict[str, int]:
        """Gauges for metrics: queued, leased, held, ready_hosts, waiting_hosts, busy_hosts, due (recrawls
        scheduled), seen (URLs ever admitted), expired_leases (put back since the backend started, cumulative),
        robots_parsed, robots_allow_all, robots_disallow_all."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and files (the state stays for the next run)."""

    @abstractmethod
    def clear(self) -> None:
        """Forget the whole frontier (a new crawl); tests and `spider.crawl --fresh-frontier` use it."""
