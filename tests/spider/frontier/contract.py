"""The frontier contract: every backend (Redis, embedded SQLite) must pass these tests unchanged.

A test module subclasses `FrontierContract` and provides `make_backend(bloom)`: a backend over fresh, empty
storage (cleared), and `reopen(backend)`: a second backend over the *same* storage (another worker, or the same
crawl restarted).  Times are passed in explicitly, so nothing here sleeps.
"""
from __future__ import annotations

import json
import random
import threading
from dataclasses import replace

import pytest

from spider.frontier.backend import DigestSeen, FrontierBackend, HostState, NewUrl, RobotsRecord, Unapplied, UrlPlace
from spider.frontier.bloom import BloomLayout, url_hashes
from spider.frontier.canonical import Canonicalizer

CANON = Canonicalizer([])
T0 = 1_700_000_000.0
SMALL = BloomLayout(capacity=1000, fp_rate=1e-6, block_bytes=4096)


def url(u: str, priority: int = 0, host: str | None = None) -> NewUrl:
    host = host or u.split("/")[2]
    key = CANON.key(u)
    return NewUrl(key.hex(), host, u, priority, json.dumps({"url": u}), url_hashes(key))


def urls_of(leased) -> list[str]:
    return [json.loads(item.payload)["url"] for item in leased]


class FrontierContract:
    def make_backend(self, bloom: BloomLayout = SMALL) -> FrontierBackend:
        raise NotImplementedError

    def reopen(self, backend: FrontierBackend, bloom: BloomLayout | None = None) -> FrontierBackend:
        """The same store opened again (by a restarted worker), with `bloom` or the layout it was opened with."""
        raise NotImplementedError

    @pytest.fixture
    def fb(self):
        backend = self.make_backend()
        yield backend
        backend.close()

    # --- admission --------------------------------------------------------------------------------
    def test_a_url_is_admitted_once(self, fb):
        assert fb.add([url("http://a.test/1"), url("http://a.test/2")], T0, 0) == ["admitted", "admitted"]
        assert fb.add([url("http://a.test/1"), url("http://a.test/3"), url("http://a.test/3")], T0, 0) == \
            ["seen", "admitted", "seen"]
        assert fb.counts(T0)["seen"] == 3
        assert fb.pending(T0) == 3

    def test_host_budget_counts_only_admitted_urls_and_does_not_mark_rejected_ones_seen(self, fb):
        out = fb.add([url(f"http://a.test/{i}") for i in range(3)] + [url("http://a.test/0")], T0, 2)
        assert out == ["admitted", "admitted", "host_budget", "seen"]
        assert fb.host_state("a.test").admitted == 2
        assert fb.add([url("http://a.test/2")], T0, 3) == ["admitted"]  # budget raised: it was never marked seen
        assert fb.add([url("http://b.test/0")], T0, 2) == ["admitted"]  # budgets are per host

    def test_a_denied_url_is_done_and_refunded_from_its_hosts_budget_once(self, fb):
        fb.add([url(f"http://a.test/{i}") for i in range(3)], T0, 0)
        [first] = fb.lease(1, T0, 60)
        assert fb.deny([first.id], None, T0) == 1
        assert fb.host_state("a.test").admitted == 2
        # applied again (its answer lost on the way back): nothing left to acknowledge, nothing more refunded
        assert fb.deny([first.id], None, T0) == 0
        assert fb.apply([("deny", ([first.id], None, T0))]) is None
        assert fb.host_state("a.test").admitted == 2
        assert fb.counts(T0)["leased"] == 0
        assert fb.release_host("a.test", T0) is True
        [second] = fb.lease(1, T0, 60)
        assert fb.deny([second.id], T0 + 3600, T0) == 1  # robots.txt may allow it later: it comes back then
        assert fb.host_state("a.test").admitted == 1
        assert fb.counts(T0)["due"] == 1

    # --- leasing and politeness ---------------------------------------------------------------------
    def test_lease_hands_out_one_url_per_ready_host_and_makes_it_busy(self, fb):
        fb.add([url(f"http://{h}.test/{i}") for h in "abc" for i in range(3)], T0, 0)
        first = fb.lease(10, T0, 60)
        assert sorted(item.host for item in first) == ["a.test", "b.test", "c.test"]
        assert fb.lease(10, T0 + 1, 60) == []  # all three busy
        assert fb.counts(T0 + 1)["busy_hosts"] == 3
        for item in first:
            fb.fetched([item.id], T0 + 600)
            fb.release_host(item.host, T0 + 5)
        assert fb.lease(10, T0 + 4.9, 60) == []  # released, but not before their next-allowed time
        assert sorted(i.host for i in fb.lease(10, T0 + 5, 60)) == ["a.test", "b.test", "c.test"]

    def test_max_urls_bounds_a_lease(self, fb):
        fb.add([url(f"http://h{i}.test/") for i in range(10)], T0, 0)
        assert len(fb.lease(4, T0, 60)) == 4
        assert len(fb.lease(100, T0, 60)) == 6

    def test_priority_then_first_in_first_out_within_a_host(self, fb):
        fb.add([url("http://a.test/deep", -3), url("http://a.test/x1", -1), url("http://a.test/seed", 5),
                url("http://a.test/x2", -1)], T0, 0)
        fb.add([url("http://a.test/x3", -1)], T0, 0)  # a later call: after the equals of the first
        order = []
        now = T0
        for _ in range(5):
            (item,) = fb.lease(1, now, 60)
            order += urls_of([item])
            fb.ack([item.id], None, now)
            fb.release_host(item.host, now)
            now += 1
        assert order == ["http://a.test/seed", "http://a.test/x1", "http://a.test/x2", "http://a.test/x3",
                         "http://a.test/deep"]
        assert fb.pending(now) == 0

    def test_hosts_that_waited_longest_come_first(self, fb):
        fb.add([url("http://a.test/1"), url("http://a.test/2"), url("http://b.test/1"), url("http://b.test/2")], T0, 0)
        items = fb.lease(2, T0, 60)
        a = next(i for i in items if i.host == "a.test")
        b = next(i for i in items if i.host == "b.test")
        fb.release_host("b.test", T0 + 1)
        fb.release_host("a.test", T0 + 2)
        assert [i.host for i in fb.lease(1, T0 + 3, 60)] == ["b.test"]
        assert a.id != b.id

    def test_an_idle_host_keeps_its_next_allowed_time(self, fb):
        fb.add([url("http://a.test/1")], T0, 0)
        (item,) = fb.lease(1, T0, 60)
        fb.ack([item.id], None, T0)
        fb.release_host("a.test", T0 + 10)  # nothing queued: idle, but still not before T0+10
        fb.add([url("http://a.test/2")], T0 + 1, 0)
        assert fb.lease(1, T0 + 9, 60) == []
        assert urls_of(fb.lease(1, T0 + 10, 60)) == ["http://a.test/2"]

    def test_host_state_travels_with_the_lease_and_is_kept_by_release(self, fb):
        fb.add([url("http://a.test/1"), url("http://a.test/2")], T0, 0)
        (item,) = fb.lease(1, T0, 60)
        assert item.host_state.delay_s < 0 and item.host_state.errors == 0
        state = HostState(delay_s=2.5, errors=3, blocked_until=T0 + 100, admitted=item.host_state.admitted)
        fb.release_host("a.test", T0 + 100, state)
        stored = fb.host_state("a.test")
        assert (stored.delay_s, stored.errors, stored.blocked_until, stored.admitted) == (2.5, 3, T0 + 100, 2)
        (again,) = fb.lease(1, T0 + 100, 60)
        assert again.host_state.delay_s == 2.5 and again.host_state.errors == 3

    # --- leases, holds, acknowledgements ------------------------------------------------------------
    def test_an_expired_lease_comes_back_and_its_host_is_ready_again(self, fb):
        fb.add([url("http://a.test/1"), url("http://a.test/2")], T0, 0)
        (item,) = fb.lease(1, T0, 30)
        assert fb.lease(1, T0 + 29, 30) == []           # host busy while the lease runs
        (again,) = fb.lease(1, T0 + 31, 30)             # a dead worker's lease expired
        assert again.id == item.id                      # the same URL first: it keeps its place
        assert fb.counts(T0 + 31)["expired_leases"] == 1

    def test_held_urls_do_not_keep_the_crawl_alive_but_come_back_unless_acknowledged(self, fb):
        fb.add([url("http://a.test/1"), url("http://b.test/1")], T0, 0)
        a, b = sorted(fb.lease(2, T0, 30), key=lambda i: i.host)
        fb.fetched([a.id, b.id], T0 + 100)
        fb.release_host("a.test", T0)
        fb.release_host("b.test", T0)
        assert fb.pending(T0 + 1) == 0
        assert fb.counts(T0 + 1)["held"] == 2
        assert fb.ack([a.id], None, T0 + 2) == 1
        assert fb.ack([a.id], None, T0 + 3) == 0        # idempotent
        assert urls_of(fb.lease(5, T0 + 101, 30)) == ["http://b.test/1"]  # b's record never became durable

    def test_renew_keeps_a_live_workers_leases(self, fb):
        fb.add([url("http://a.test/1")], T0, 0)
        (item,) = fb.lease(1, T0, 30)
        assert fb.renew([item.id, "0" * 32], T0 + 60) == [item.id]  # an id it does not hold is not renewed
        fb.add([url("http://a.test/2")], T0, 0)
        assert fb.lease(1, T0 + 45, 30) == []  # neither the URL nor its host: both stay with the live worker
        fb.fetched([item.id], T0 + 90)
        assert fb.renew([item.id], T0 + 200) == [item.id]  # a hold is renewed too
        fb.release_host("a.test", T0 + 50)
        (other,) = fb.lease(1, T0 + 150, 30)
        assert urls_of([other]) == ["http://a.test/2"]  # the host is free again; the held URL is not
        fb.ack([other.id], None, T0 + 150)
        fb.release_host("a.test", T0 + 150)
        assert urls_of(fb.lease(1, T0 + 201, 30)) == ["http://a.test/1"]  # not renewed: back

    def test_requeue_puts_urls_back_ahead_of_later_ones_and_ack_leaves_them_alone(self, fb):
        fb.add([url("http://a.test/1"), url("http://a.test/2")], T0, 0)
        (item,) = fb.lease(1, T0, 30)
        fb.fetched([item.id], T0 + 100)
        fb.requeue([item.id], T0)                       # a retry
        fb.release_host("a.test", T0 + 1)
        assert fb.ack([item.id], None, T0) == 0         # the first attempt's record became durable: not done yet
        (again,) = fb.lease(1, T0 + 1, 30)
        assert again.id == item.id
        assert fb.ack([again.id], None, T0 + 2) == 1

    def test_a_worker_whose_lease_expired_can_no_longer_change_it(self, fb):
        fb.add([url("http://a.test/1"), url("http://a.test/2")], T0, 0)
        stale, other = fb, self.reopen(fb)
        try:
            (item,) = stale.lease(1, T0, 30)
            (again,) = other.lease(1, T0 + 31, 30)  # the stale worker's lease expired: the URL and its host move on
            assert again.id == item.id
            # the stale worker wakes up and finishes its fetch: none of it touches the other worker's lease
            assert stale.renew([item.id], T0 + 500) == []  # the worker learns it no longer holds the URL
            stale.fetched([item.id], T0 + 500)
            stale.requeue([item.id], T0 + 32, {item.id: json.dumps({"url": "http://a.test/1", "retry_times": 9})})
            assert stale.ack([item.id], None, T0 + 32) == 0
            assert stale.release_host("a.test", T0 + 32) is False
            assert stale.lease(5, T0 + 33, 30) == []  # the host stays busy: no second fetcher on it
            counts = other.counts(T0 + 33)
            assert (counts["queued"], counts["leased"], counts["held"], counts["busy_hosts"]) == (1, 1, 0, 1)
            # not renewed either: the other worker's lease ends when it said, with the URL's own payload
            (third,) = stale.lease(1, T0 + 62, 30)
            assert third.id == item.id and "retry_times" not in json.loads(third.payload)
            # and the rule holds the other way round, for holds too
            stale.fetched([third.id], T0 + 100)
            assert other.ack([third.id], None, T0 + 63) == 0 and other.release_host("a.test", T0 + 63) is False
            assert stale.counts(T0 + 63)["held"] == 1
            # a recovered file's records are durable whoever holds their URLs
            assert other.ack([third.id], None, T0 + 64, anyone=True) == 1
            assert stale.release_host("a.test", T0 + 64) is True
            assert urls_of(other.lease(5, T0 + 64, 30)) == ["http://a.test/2"]
        finally:
            other.close()

    def test_a_late_release_does_not_cut_short_the_delay_of_a_fetch_made_since(self, fb):
        fb.add([url(f"http://a.test/{i}") for i in (1, 2, 3)], T0, 0)
        stale, other = fb, self.reopen(fb)
        try:
            (item,) = stale.lease(1, T0, 30)
            (again,) = other.lease(1, T0 + 31, 30)  # the stale worker's lease expired: the other fetches the URL
            assert again.id == item.id
            # its fetch ended at T0 + 31 with a 5 s delay, its first error (a backoff)
            assert other.release_host("a.test", T0 + 36, HostState(5.0, 1, 0.0, 0)) is True
            other.ack([again.id], None, T0 + 31)
            # the stale worker wakes at T0 + 32 and hands back the host it sent nothing to (a lapsed lease), or
            # finishes its own fetch and releases the host with the delay and record it made before it stalled
            stale.release_host("a.test", T0 + 32)
            stale.apply([("release_host", ("a.test", T0 + 2, HostState(2.0, 0, 0.0, 0)))])
            assert (stale.host_state("a.test").delay_s, stale.host_state("a.test").errors) == (5.0, 1)
            assert stale.lease(5, T0 + 33, 30) == [] and other.lease(5, T0 + 35.9, 30) == []
            assert urls_of(other.lease(5, T0 + 36, 30)) == ["http://a.test/2"]
            # the worker holding the host sets the time it says (the SQLite store keeps its lease expiry there)
            assert other.release_host("a.test", T0 + 37) is True
            assert urls_of(stale.lease(5, T0 + 37, 30)) == ["http://a.test/3"]
        finally:
            other.close()

    def test_a_release_names_its_lease_so_the_same_workers_lapsed_lease_cannot_end_its_next(self, fb):
        fb.add([url(f"http://a.test/{i}") for i in (1, 2)], T0, 0)
        (first,) = fb.lease(1, T0, 30)
        (again,) = fb.lease(1, T0 + 31, 30)  # this worker's own lease lapsed, and it leased the host again
        assert again.id == first.id and again.host_lease == first.host_lease + 1
        # the first lease's fetch ends late: the worker owns the host's lease, but not that one
        assert fb.release_host("a.test", T0 + 32, HostState(2.0, 0, 0.0, 0), first.host_lease) is False
        assert fb.apply([("release_host", ("a.test", T0 + 32, None, first.host_lease))]) is None
        assert fb.lease(5, T0 + 33, 30) == []  # still busy: the second fetch is in flight
        assert fb.counts(T0 + 33)["busy_hosts"] == 1
        assert fb.release_host("a.test", T0 + 40, HostState(3.0, 0, 0.0, 0), again.host_lease) is True
        assert fb.host_state("a.test").delay_s == 3.0
        assert fb.lease(5, T0 + 39.9, 30) == []
        (third,) = fb.lease(5, T0 + 40, 30)
        assert urls_of([third]) == ["http://a.test/2"] and third.host_lease == again.host_lease + 1

    def test_a_late_release_keeps_the_record_of_a_fetch_made_since_whatever_the_clocks_say(self, fb):
        fb.add([url(f"http://a.test/{i}") for i in (1, 2)], T0, 0)
        stale, other = fb, self.reopen(fb)
        try:
            (item,) = stale.lease(1, T0, 30)
            (again,) = other.lease(1, T0 + 31, 30)
            assert other.release_host("a.test", T0 + 36, HostState(5.0, 1, 0.0, 0), again.host_lease) is True
            other.ack([again.id], None, T0 + 31)
            # the stale worker's clock runs 100 s ahead: its release says a later time than the other fetch's
            stale.release_host("a.test", T0 + 140, HostState(2.0, 0, 0.0, 0), item.host_lease)
            state = stale.host_state("a.test")
            assert (state.delay_s, state.errors) == (5.0, 1)  # the record of the later lease stays
            assert other.lease(5, T0 + 139, 30) == []  # and the later of the two times: never too early
            assert urls_of(other.lease(5, T0 + 140, 30)) == ["http://a.test/2"]
        finally:
            other.close()

    def test_a_lapsed_lease_that_nobody_took_over_is_still_the_hosts_last_fetch(self, fb):
        fb.add([url(f"http://a.test/{i}") for i in (1, 2)] + [url("http://b.test/1")], T0, 0)
        fb.release_host("a.test", T0 - 1, HostState(1.0, 0, 0.0, 0))  # a record from an earlier fetch
        (item,) = fb.lease(1, T0, 30)
        assert item.host == "a.test"
        # the lease lapses and is reaped, but the next lease goes to b.test, which waited longer
        assert [lease.host for lease in fb.lease(1, T0 + 31, 30)] == ["b.test"]
        # the fetch ended after the lease's expiry, and no worker leased the host meanwhile: its record stands
        assert fb.release_host("a.test", T0 + 45, HostState(4.0, 2, 0.0, 0), item.host_lease) is True
        state = fb.host_state("a.test")
        assert (state.delay_s, state.errors) == (4.0, 2)
        assert fb.lease(5, T0 + 44, 30) == []
        assert urls_of(fb.lease(5, T0 + 45, 30)) == ["http://a.test/1"]  # the lapsed URL comes back first

    def test_operations_applied_together_do_what_each_call_does(self, fb):
        fb.add([url(f"http://{h}.test/{i}") for h in "abc" for i in (1, 2)], T0, 0)
        a, b, c = sorted(fb.lease(3, T0, 30), key=lambda item: item.host)
        robots = RobotsRecord("parsed", b"User-agent: *\nDisallow: /x\n", T0, T0 + 86400, "HTTP 200")
        fb.apply([("fetched", ([a.id], T0 + 100)), ("release_host", ("a.test", T0 + 5)),
                  ("requeue", ([b.id], T0, {b.id: json.dumps({"url": "http://b.test/1", "retry_times": 1})})),
                  ("release_host", ("b.test", T0)),
                  ("ack", ([a.id], None, T0 + 1)), ("deny", ([c.id], None, T0 + 1)),
                  ("release_host", ("c.test", T0 + 1)), ("robots_put", ("a.test", robots)),
                  ("scope_add", (["z.test"],))])
        assert fb.robots_get("a.test") == robots and "z.test" in fb.scope()
        assert fb.host_state("c.test").admitted == 1
        counts = fb.counts(T0 + 1)
        assert (counts["queued"], counts["leased"], counts["held"], counts["busy_hosts"]) == (4, 0, 0, 0)
        # b's retry comes first with its new payload; a's host waits until T0 + 5; a/1 and c/1 are done
        leased = fb.lease(5, T0 + 1, 30)
        assert sorted(urls_of(leased)) == ["http://b.test/1", "http://c.test/2"]
        assert json.loads(next(i for i in leased if i.host == "b.test").payload)["retry_times"] == 1
        assert urls_of(fb.lease(5, T0 + 5, 30)) == ["http://a.test/2"]

    def test_operations_applied_together_stop_at_the_first_that_fails_and_say_where(self, fb):
        fb.add([url(f"http://{h}.test/1") for h in "ab"], T0, 0)
        a, b = sorted(fb.lease(2, T0, 30), key=lambda item: item.host)
        with pytest.raises(Unapplied) as failed:
            fb.apply([("release_host", ("a.test", T0)), ("ack", (None, None, T0)), ("release_host", ("b.test", T0))])
        assert failed.value.done == 1 and isinstance(failed.value.__cause__, TypeError)
        assert fb.counts(T0)["busy_hosts"] == 1  # a's host is free; b's, after the failure, is not
        fb.apply([("release_host", ("b.test", T0))])
        assert fb.counts(T0)["busy_hosts"] == 0

    def test_a_step_adds_applies_and_leases_in_that_order(self, fb):
        fb.add([url("http://a.test/1"), url("http://b.test/1")], T0, 0)
        a, b = sorted(fb.lease(2, T0, 30), key=lambda item: item.host)
        outcomes, leased = fb.step([url("http://a.test/2"), url("http://b.test/1"), url("http://c.test/1")],
                                   [("ack", ([a.id], None, T0)), ("release_host", ("a.test", T0))], 10, T0, 30, 0)
        assert outcomes == ["admitted", "seen", "admitted"]
        assert sorted(urls_of(leased)) == ["http://a.test/2", "http://c.test/1"]  # b's host is still busy
        assert fb.step([], [], 0, T0, 30, 0) == ([], [])
        # an operation that fails: the URLs went in, and the operations before it
        with pytest.raises(Unapplied) as failed:
            fb.step([url("http://d.test/1")], [("requeue", ([b.id], T0)), ("ack", (None, None, T0)),
                                               ("release_host", ("b.test", T0))], 10, T0, 30, 0)
        assert failed.value.done == 1 and failed.value.outcomes == ["admitted"]
        assert fb.counts(T0)["busy_hosts"] == 3  # a, b and c: b's release came after the failure
        fb.apply([("release_host", ("b.test", T0))])
        assert sorted(urls_of(fb.lease(10, T0, 30))) == ["http://b.test/1", "http://d.test/1"]

    def test_a_requeued_url_can_carry_a_new_payload(self, fb):
        fb.add([url("http://a.test/1")], T0, 0)
        (item,) = fb.lease(1, T0, 30)
        fb.requeue([item.id], T0, {item.id: json.dumps({"url": "http://a.test/1", "retry_times": 1})})
        fb.release_host("a.test", T0)
        (again,) = fb.lease(1, T0, 30)
        assert json.loads(again.payload)["retry_times"] == 1

    def test_a_recrawl_comes_back_when_due(self, fb):
        fb.add([url("http://a.test/1")], T0, 0)
        (item,) = fb.lease(1, T0, 30)
        fb.ack([item.id], T0 + 1000, T0)
        fb.release_host("a.test", T0 + 1)
        assert fb.pending(T0 + 2) == 0 and fb.counts(T0 + 2)["due"] == 1
        assert fb.lease(1, T0 + 999, 30) == []
        assert urls_of(fb.lease(1, T0 + 1000, 30)) == ["http://a.test/1"]
        assert fb.add([url("http://a.test/1")], T0 + 1001, 0) == ["seen"]

    # --- looking a URL up (python -m spider.lookup) ------------------------------------------------------
    def test_where_follows_a_url_through_every_state_and_its_place_in_its_hosts_queue(self, fb):
        fb.scope_add(["a.test"])
        seed, first, second = url("http://a.test/seed", 5), url("http://a.test/1", -1), url("http://a.test/2", -1)
        never = url("http://a.test/never")
        fb.add([first, second, seed, url("http://b.test/1")], T0, 0)
        assert fb.where(never) == UrlPlace(None, in_scope=True, host_next=T0)
        places = [fb.where(u) for u in (seed, first, second)]
        assert [(p.state, p.ahead, p.seen) for p in places] == [("queued", 0, True), ("queued", 1, True),
                                                                ("queued", 2, True)]
        assert all(p.in_scope and p.host_next == T0 and not p.host_busy and p.owner is None for p in places)
        assert not fb.where(url("http://b.test/1")).in_scope      # admitted by a worker that knew it, not in scope

        assert [i.id for i in fb.lease(10, T0, 60) if i.host == "a.test"] == [seed.id]
        assert fb.where(seed) == UrlPlace("leased", T0 + 60, fb.owner, seen=True, in_scope=True, host_busy=True)
        assert fb.where(first).ahead == 0 and fb.where(first).host_busy
        fb.fetched([seed.id], T0 + 100)
        assert fb.where(seed) == UrlPlace("held", T0 + 100, fb.owner, seen=True, in_scope=True, host_busy=True)
        fb.release_host("a.test", T0 + 5)
        assert (fb.where(first).host_next, fb.where(first).host_busy) == (T0 + 5, False)
        fb.ack([seed.id], T0 + 1000, T0 + 6)
        assert fb.where(seed) == UrlPlace("due", T0 + 1000, None, seen=True, in_scope=True, host_next=T0 + 5)

        (item,) = [i for i in fb.lease(10, T0 + 5, 60) if i.host == "a.test"]
        assert item.id == first.id
        fb.ack([item.id], None, T0 + 6)                            # fetched, no recrawl: done
        assert fb.where(first) == UrlPlace(None, seen=True, in_scope=True, host_busy=True)
        assert fb.where(second).ahead == 0

    # --- robots.txt and digests ---------------------------------------------------------------------
    def test_robots_records_are_shared(self, fb):
        assert fb.robots_get("a.test") is None
        record = RobotsRecord("parsed", b"User-agent: *\nDisallow: /private\n", T0, T0 + 86400, "HTTP 200")
        fb.robots_put("a.test", record)
        other = self.reopen(fb)
        try:
            assert other.robots_get("a.test") == record
        finally:
            other.close()
        fb.robots_put("a.test", RobotsRecord("disallow_all", b"", T0, T0 + 60, "HTTP 503"))
        assert fb.robots_get("a.test").status == "disallow_all"
        assert fb.counts(T0)["robots_disallow_all"] == 1

    def test_a_hosts_tdmrep_file_rides_in_its_robots_record(self, fb):
        """frontier.tdmrep: respect keeps the host's TDMRep file with its robots.txt: asked (a body, or b"" for
        none), or not asked (None); a record written again without it drops the old file."""
        rules = b'[{"location": "/private/*", "tdm-reservation": 1}]'
        with_file = RobotsRecord("parsed", b"User-agent: *\nAllow: /\n", T0, T0 + 86400, "HTTP 200", rules)
        fb.robots_put("a.test", with_file)
        fb.robots_put("b.test", RobotsRecord("allow_all", b"", T0, T0 + 86400, "HTTP 404", b""))
        other = self.reopen(fb)
        try:
            assert other.robots_get("a.test") == with_file and other.robots_get("b.test").tdm == b""
        finally:
            other.close()
        fb.robots_put("a.test", replace(with_file, tdm=None))
        assert fb.robots_get("a.test").tdm is None

    def test_a_url_of_a_host_outside_the_scope_is_refused_and_not_marked_seen(self, fb):
        fb.scope_add(["a.test"])
        offsite = replace(url("http://b.test/1"), in_scope=False)
        assert fb.add([replace(url("http://a.test/1"), in_scope=False), offsite], T0, 0) == ["admitted", "offsite"]
        fb.scope_add(["b.test"])  # another worker's seeds bring the host in
        assert fb.add([offsite], T0, 0) == ["admitted"]

    def test_the_scope_is_shared_by_every_worker(self, fb):
        fb.scope_add(["a.test", "b.test"])
        other = self.reopen(fb)
        try:
            other.scope_add(["b.test", "c.test"])
            assert fb.scope() == other.scope() == {"a.test", "b.test", "c.test"}
        finally:
            other.close()
        fb.clear()
        assert fb.scope() == set()

    def test_payload_digests_are_test_and_set_in_order_within_a_batch(self, fb):
        first = DigestSeen("http://a.test/1", "2026-01-01T00:00:00Z", "<urn:uuid:1>")
        assert fb.digest_firsts([("sha1:ABC", first)]) == [None]
        later = DigestSeen("http://b.test/", "2026-01-02T00:00:00Z", "<urn:uuid:2>")
        other = DigestSeen("http://c.test/", "2026-01-02T00:00:00Z", "<urn:uuid:3>")
        again = DigestSeen("http://d.test/", "2026-01-03T00:00:00Z", "<urn:uuid:4>")
        # one batch: a digest stored before, a new one, and that new one again (its first capture is the batch's own)
        assert fb.digest_firsts([("sha1:ABC", later), ("sha1:NEW", other), ("sha1:NEW", again)]) == [first, None, other]
        assert fb.digest_firsts([]) == []

    # --- durability, concurrency, the Bloom filter ------------------------------------------------
    def test_a_reopened_frontier_resumes_where_it_stopped(self, fb):
        fb.add([url("http://a.test/1"), url("http://a.test/2"), url("http://b.test/1")], T0, 0)
        (item,) = [i for i in fb.lease(5, T0, 30) if i.host == "a.test"]
        fb.close()
        again = self.reopen(fb)
        try:
            assert again.add([url("http://a.test/1")], T0, 0) == ["seen"]
            assert again.pending(T0) == 3
            assert sorted(urls_of(again.lease(5, T0 + 31, 30))) == ["http://a.test/1", "http://b.test/1"]
        finally:
            again.close()

    def test_workers_sharing_a_frontier_never_lease_a_url_or_a_host_twice(self, fb):
        fb.add([url(f"http://h{h}.test/{i}") for h in range(20) for i in range(10)], T0, 0)
        workers = [fb] + [self.reopen(fb) for _ in range(3)]
        leased: list[list] = [[] for _ in workers]
        barrier = threading.Barrier(len(workers))
        STEPS = 25  # 20 hosts x 10 URLs: 10 steps if the workers never got in each other's way

        def work(n: int) -> None:
            for step in range(STEPS):  # the workers share one clock: every step starts and ends together
                barrier.wait()
                got = workers[n].lease(7, T0 + step * 10, 5)
                leased[n].append(got)
                barrier.wait()
                for item in got:
                    workers[n].ack([item.id], None, T0 + step * 10)
                    workers[n].release_host(item.host, T0 + step * 10 + 9)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(len(workers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for other in workers[1:]:
            other.close()
        ids = [i.id for per in leased for batch in per for i in batch]
        assert len(ids) == len(set(ids)), "a URL was leased twice"
        assert len(ids) == 200
        for step in range(STEPS):  # within one time step, a host went to one worker at most once
            hosts = [i.host for per in leased for i in per[step]]
            assert len(hosts) == len(set(hosts))

    def test_bloom_filter_has_no_false_negatives_grows_past_its_capacity_and_keeps_its_rate(self):
        fb = self.make_backend(BloomLayout(capacity=2000, fp_rate=1e-3, block_bytes=1024))
        try:
            rng = random.Random(7)
            added = [url(f"http://h{rng.randrange(50)}.test/{rng.getrandbits(64):x}") for _ in range(6000)]
            assert set(fb.add(added, T0, 0)) <= {"admitted", "seen"}
            assert set(fb.add(added, T0, 0)) == {"seen"}  # no false negatives, across the stages it grew
            fresh = [url(f"http://h{rng.randrange(50)}.test/new/{rng.getrandbits(64):x}") for _ in range(20000)]
            false_positives = fb.add(fresh, T0, 0).count("seen")
            assert false_positives <= 3 * 1e-3 * 20000, false_positives
        finally:
            fb.close()

    def test_a_filter_built_before_lines_keeps_its_layout_so_its_urls_stay_seen(self):
        """A frontier written before the Bloom filter had lines (lines=1), opened under today's layout, keeps its
        own: its URLs are still seen.  clear() starts over with today's."""
        fb = self.make_backend(replace(SMALL, lines=1))
        old = [url(f"http://h{i % 5}.test/{i}") for i in range(200)]
        assert fb.add(old, T0, 0) == ["admitted"] * 200
        again = self.reopen(fb, SMALL)
        try:
            assert SMALL.lines == 4 and again.bloom.lines == 1
            assert again.add(old, T0, 0) == ["seen"] * 200
            assert again.add([url("http://h0.test/new")], T0, 0) == ["admitted"]
            again.clear()
            assert again.bloom == SMALL
            assert again.add(old[:10], T0, 0) == ["admitted"] * 10
            assert again.add(old[:10], T0, 0) == ["seen"] * 10
        finally:
            again.close()
            fb.close()

    def test_clear_forgets_everything(self, fb):
        fb.add([url("http://a.test/1")], T0, 0)
        fb.robots_put("a.test", RobotsRecord("allow_all", b"", T0, T0 + 10))
        fb.clear()
        assert fb.pending(T0) == 0 and fb.robots_get("a.test") is None
        assert fb.add([url("http://a.test/1")], T0, 0) == ["admitted"]
