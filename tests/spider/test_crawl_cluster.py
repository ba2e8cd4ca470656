"""One crawl shared by several `python -m spider.crawl` processes over a real Redis (one server, a restarted
one, a 3-master Redis Cluster): every reachable allowed page fetched exactly once, per-host politeness kept
across the workers, a worker killed with SIGKILL losing nothing, and the crawl stopping on time.

The ground truth is the web itself: `cluster_helpers.reachable` walks the local web's links and redirects from
the seeds, with each host's robots.txt read by Protego.  What was fetched is judged at the server (localweb's
request log) and in the WARC files the workers wrote, never by the crawler's own counters alone.

The workers run with `concurrent_requests=1` and `frontier.buffer=1`.  With the defaults (16 and 32) a worker
that releases a host asks the frontier again the moment the host is due, while the other worker only polls every
frontier.refill_every_s, so each host stays with the worker that first leased it; on a five-host web one worker
often takes every host and the other idles (seen: 0 of 57 and 5 of 70 fetches), and the test would prove nothing
about two workers sharing hosts.  With one request in hand each, hosts pass from worker to worker all along.
"""
from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
import redis

from cluster_helpers import (Reachable, captures, captures_so_far, min_gaps, reachable,
                             requested, start_worker, stop_all, wait_all, wait_for)
from crawl_helpers import read_warc
from localweb import LocalWeb, load_config
from localweb.hostile import hostile_config
from localweb.politeness_web import PolitenessWeb
from tests.support.redisserver import RedisCluster, RedisServer

# Five hosts of the local web, small: 65 URLs, robots.txt Disallow rules on each, a Crawl-delay (blog, 0.6 s),
# a 429 with Retry-After 1 s that succeeds on its retry (blog /popular), a 500 (news), 404s, 301/302 redirects
# to pages also linked directly, a gzip-encoded and a charset-less page; the slow page answers within the timeout.
WEB = ["pages_per_host=8", "large_page_bytes=200000", "slow_page_seconds=1", "crawl_delay_seconds=0.6",
       "rate_limited_responses=1", "retry_after_seconds=1"]
HOSTS = ("news", "blog", "wiki", "forum", "shop")
DELAY = 0.3
RETRY_TIMES = 1            # crawl_helpers.FAST
RETRIED = {500, 502, 503, 504, 522, 524, 408, 429}   # conf/crawl.yaml retry_http_codes
TOLERANCE = 0.02           # clock slack on a gap: workers time gaps by time.time(), the server by monotonic
SHARED = [f"download_delay_s={DELAY}", "randomize_delay=true", "depth_limit=10",
          "frontier.lease_s=4", "frontier.renew_every_s=1", "warc.max_file_age_s=2",
          "concurrent_requests=1", "frontier.buffer=1"]


def web_seeds(web) -> list[str]:
    return [s for s in web.seeds if urlsplit(s).hostname.split(".")[0] in HOSTS]


def ground_truth() -> Reachable:
    """From a web of the same configuration that serves nothing: walking it must not touch the served one's
    counters (the 429 page answers 429 only to its first request)."""
    fresh = LocalWeb(load_config(WEB))
    return reachable(fresh, web_seeds(fresh))


def expected_requests(truth: Reachable) -> Counter:
    """Requests a correct crawl sends per URL: one, or 1 + retry_times for answers it retries (the 500 twice;
    the 429 page once refused, then answered); robots.txt once per host for the whole cluster."""
    out = Counter({url: 1 + RETRY_TIMES if status in RETRIED else 1 for url, status in truth.urls.items()})
    out.update({f"http://{host}/robots.txt": 1 for host in truth.robots})
    return out


def required_gap(host: str) -> float:
    return 0.6 if host.startswith("blog.") else DELAY   # blog's robots.txt: Crawl-delay 0.6 (above the delay)


def assert_polite(web, hosts) -> None:
    """Consecutive requests to one host (whichever worker sent them) at least its delay apart, and nothing
    within Retry-After of a 429."""
    gaps = min_gaps(web.hits, hosts)
    for host, gap in gaps.items():
        assert gap >= required_gap(host) - TOLERANCE, f"{host}: two requests {gap:.3f} s apart (all gaps: {gaps})"
    for host in hosts:
        log = web.hits.log(host)
        for a, b in zip(log, log[1:]):
            if a.status == 429:
                assert b.at - a.at >= 1.0 - TOLERANCE, f"{host}{b.target} {b.at - a.at:.2f} s after a 429 " \
                                                       "with Retry-After: 1"


def assert_exactly_once(web, truth: Reachable, workers) -> None:
    """Every reachable allowed URL requested exactly as often as a single correct crawl requests it, nothing
    else requested, and the workers' WARC files together hold one capture per request that was answered."""
    got = requested(web.hits)
    want = expected_requests(truth)
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} reachable URL(s) never requested: {missing[:10]}"
    unexpected = sorted(set(got) - set(want))
    assert not unexpected, f"requested although not reachable or disallowed by robots.txt: {unexpected[:10]}"
    assert not (set(got) & truth.disallowed)
    wrong = {url: (n, want[url]) for url, n in got.items() if n != want[url]}
    assert not wrong, f"URL -> (requests, expected): {wrong}"
    files = [p for w in workers for p in w.closed_files()]
    assert captures(files) == got, "the WARC files of the workers together must record each request once"


def assert_clean_finish(worker) -> None:
    assert worker.returncode == 0, worker.log[-3000:]
    assert worker.stats["finish_reason"] == "finished", worker.stats.get("finish_reason")
    assert not worker.open_files(), f"worker {worker.index} left {worker.open_files()}"
    assert "Traceback" not in worker.log, worker.log[-3000:]


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def workers():
    started: list = []
    yield started
    stop_all(started)


def crawl_overrides(web, frontier_url: str) -> list[str]:
    return [f"proxy={web.proxy_url}", f"frontier.url={frontier_url}", *SHARED]


def start_two(tmp_path, web, frontier_url: str, workers: list, second_seeded: bool = True) -> set[str]:
    """Two workers on one frontier, the second on the same seeds or none; returns the seeds' hosts."""
    seeds = web_seeds(web)
    for i in range(2):
        workers.append(start_worker(i, tmp_path, tmp_path / "seeds.txt", seeds if i == 0 or second_seeded else None,
                                    crawl_overrides(web, frontier_url)))
    return {urlsplit(s).hostname for s in seeds}


def finish_all(workers: list) -> None:
    for w in workers:
        w.wait(120)
    for w in workers:
        assert_clean_finish(w)


def test_two_workers_share_one_crawl_each_page_once_and_hosts_stay_polite(tmp_path, redis_server, workers):
    truth = ground_truth()
    with LocalWeb(load_config(WEB)) as web:
        # the second worker has no seeds: it joins the crawl and keeps to the hosts the first one's seeds brought
        hosts = start_two(tmp_path, web, redis_server.url, workers, second_seeded=False)
        finish_all(workers)
        assert "joining the crawl" in workers[1].log
        assert_exactly_once(web, truth, workers)
        assert_polite(web, hosts)
        # both workers did part of the crawl, and some host was fetched by both (so the gaps above were kept
        # across processes, through the host records in Redis)
        by_worker = [{urlsplit(u).hostname for u in captures(w.closed_files())} for w in workers]
        assert all(by_worker), f"hosts fetched per worker: {by_worker}"
        assert by_worker[0] & by_worker[1], f"no host was fetched by both workers: {by_worker}"
        # robots.txt fetched once per host for the cluster: the other worker read it from Redis
        assert sum(w.stats["scrapy"].get("weblm/robots/fetches", 0) for w in workers) == len(hosts)
        assert sum(w.stats["pages_fetched"] for w in workers) == sum(expected_requests(truth).values())


def test_a_killed_worker_loses_nothing_its_urls_come_back_to_the_survivor(tmp_path, redis_server, workers):
    truth = ground_truth()
    with LocalWeb(load_config(WEB)) as web:
        hosts = start_two(tmp_path, web, redis_server.url, workers)
        victim, survivor = workers
        # mid-crawl: the victim has closed a WARC file with fetches in it (acknowledged) and has fetches in its
        # open file (held until that file is durable), and about a third of the crawl is done
        wait_for(lambda: web.hits.count() >= 25 and captures(victim.closed_files())
                 and any(captures_so_far(p) for p in victim.open_files()), 60,
                 "the first worker to have fetches in a closed and in its open WARC file")
        assert survivor.proc.poll() is None and web.hits.count() < sum(expected_requests(truth).values())
        victim.kill()
        killed_at_hits = web.hits.count()
        lost = Counter()   # in the victim's open file: fetched, never acknowledged
        for path in victim.open_files():
            lost.update(captures_so_far(path))
        lost_urls = set(lost) - set(captures(victim.closed_files()))
        survivor.wait(120)
        assert victim.returncode == -9
        assert_clean_finish(survivor)

        got = requested(web.hits)
        want = expected_requests(truth)
        closed = [p for w in workers for p in w.closed_files()]   # the victim's .open file is lost
        recorded = captures(closed)
        missing = sorted(url for url in want if url not in recorded)
        assert not missing, f"{len(missing)} reachable URL(s) without a record in any closed WARC file: {missing}"
        assert not set(got) - set(want), f"requested although not reachable: {sorted(set(got) - set(want))}"
        # what the victim had in hand is fetched again (once more at most); the survivor alone fetched nothing twice
        assert all(n <= 2 * want[url] for url, n in got.items()), {u: n for u, n in got.items() if n > want[u]}
        mine = captures(survivor.closed_files())
        assert all(n <= want[url] for url, n in mine.items()), {u: n for u, n in mine.items() if n > want[u]}
        # the survivor took the victim's URLs back when their leases ran out (frontier.lease_s)
        assert survivor.stats["scrapy"].get("weblm/frontier/expired_leases", 0) >= 1
        assert len(web.hits.log()) > killed_at_hits
        assert lost_urls, "the victim's open WARC file held no fetch: the kill tested nothing"
        assert lost_urls <= set(mine), f"fetched by the victim, lost with its open file, never fetched again: " \
                                       f"{sorted(lost_urls - set(mine))}"
        print(f"\nkilled at {killed_at_hits} requests; {len(lost_urls)} URL(s) lost with the victim's open file "
              f"and fetched again by the survivor; {sum(got.values())} requests for {len(want)} URLs in all; "
              f"expired leases {survivor.stats['scrapy'].get('weblm/frontier/expired_leases')}")
        assert_polite(web, hosts)


def test_a_worker_stalled_past_its_leases_loses_nothing_and_no_host_gets_two_fetchers(tmp_path, redis_server,
                                                                                      workers):
    truth = ground_truth()
    with LocalWeb(load_config(WEB)) as web:
        hosts = start_two(tmp_path, web, redis_server.url, workers)
        stalled, other = workers
        wait_for(lambda: web.hits.count() >= 20 and any(captures_so_far(p) for p in stalled.open_files()), 60,
                 "the first worker to have fetches held for its open WARC file")
        held = Counter()
        for path in stalled.open_files():
            held.update(captures_so_far(path))
        stalled_at = web.hits.count()
        stalled.stall(2 * 4 + 1)  # frontier.lease_s=4: its leases and holds expire, the other worker takes them
        finish_all(workers)

        got = requested(web.hits)
        want = expected_requests(truth)
        recorded = captures([p for w in workers for p in w.closed_files()])
        missing = sorted(url for url in want if url not in recorded)
        assert not missing, f"{len(missing)} reachable URL(s) without a record in any closed WARC file: {missing}"
        assert not set(got) - set(want), f"requested although not reachable: {sorted(set(got) - set(want))}"
        # what the stalled worker held may be fetched twice (once by each), nothing more
        assert all(n <= 2 * want[url] for url, n in got.items()), {u: n for u, n in got.items() if n > want[u]}
        assert other.stats["scrapy"].get("weblm/frontier/expired_leases", 0) >= 1
        assert set(held) <= set(captures(other.closed_files())) | set(captures(stalled.closed_files()))
        # the stalled worker's late releases and acknowledgements left the other worker's leases alone: every
        # host kept its delay, whichever worker asked
        assert_polite(web, hosts)
        mine = stalled.stats["scrapy"]
        print(f"\nstalled at {stalled_at} requests holding {len(held)} URL(s); {sum(got.values())} requests for "
              f"{len(want)} URLs; the stalled worker's leases lost {mine.get('weblm/frontier/leases_lost', 0)}, "
              f"lapsed unsent {mine.get('weblm/frontier/lapsed_unsent', 0)}")


def test_the_crawl_rides_out_a_redis_restart(tmp_path, workers):
    server = RedisServer(tmp_path / "redis", persist=True)
    try:
        truth = ground_truth()
        with LocalWeb(load_config(WEB)) as web:
            hosts = start_two(tmp_path, web, server.url, workers)
            wait_for(lambda: web.hits.count() >= 20, 60, "20 requests")
            server.stop()
            time.sleep(2.0)   # every worker's frontier calls fail meanwhile (leases last 4 s, renewed each 1 s)
            down_hits = web.hits.count()
            server.start()    # same port, same append-only file
            finish_all(workers)
            errors = [w.stats["errors"].get("frontier_backend", 0) for w in workers]
            assert all(errors), f"frontier backend errors per worker: {errors} (Redis was down for 2 s)"
            print(f"\nfrontier backend errors per worker while Redis was down: {errors}")
            assert web.hits.count() > down_hits, "nothing was fetched after Redis came back"
            assert_exactly_once(web, truth, workers)
            assert_polite(web, hosts)
    finally:
        server.stop()


def test_a_worker_whose_redis_does_not_answer_at_start_says_so_in_one_line_and_exits_1(tmp_path):
    """Before Scrapy starts: a service manager's Restart=on-failure tries again (exit 1, not a setting error's 2),
    and the message names the host and port, never the password the URL may carry."""
    import subprocess
    from crawl_helpers import ROOT, crawl_command, env
    from tests.support.s3server import free_port
    port = free_port()   # nothing listens there
    for url in (f"redis://:secret@127.0.0.1:{port}/0", f"redis+cluster://127.0.0.1:{port}"):
        done = subprocess.run(crawl_command(["http://a.weblm.test/"], tmp_path, [f"frontier.url={url}"]), cwd=ROOT,
                              env=env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr[-3000:]
        assert f"the frontier's Redis at 127.0.0.1:{port} does not answer" in done.stderr, done.stderr[-3000:]
        assert "Traceback" not in done.stderr and "secret" not in done.stderr


def test_a_redis_cluster_crawl_equals_the_single_server_one(tmp_path, workers):
    cluster = RedisCluster(tmp_path / "cluster")
    try:
        truth = ground_truth()
        with LocalWeb(load_config(WEB)) as web:
            hosts = start_two(tmp_path, web, cluster.url, workers)
            finish_all(workers)
            assert_exactly_once(web, truth, workers)
            assert_polite(web, hosts)
        # the frontier's partitions really are spread over the three masters
        keys = [redis.Redis(port=node.port).dbsize() for node in cluster.nodes]
        assert all(keys), f"keys per master: {keys}"
    finally:
        cluster.stop()


CLOSE_AFTER = 5
TIMEOUT = 6.0
SLACK = 3.0   # from the deadline's last timeout to the process's exit: WARC files closed, counters written


def test_close_after_seconds_stops_on_time_with_slow_answers_in_flight(tmp_path, redis_server, workers):
    # the adversarial web: the slow host answers after 30 s, robots-hang's robots.txt never; both hold a
    # request in flight at the deadline, each given up by download_timeout_s at the latest
    cfg = hostile_config(["slow_seconds=30", "pages_per_site=12", "small_site_pages=4",
                          "bomb_bytes=16777216", "enormous_bytes=12000000"])
    with PolitenessWeb(cfg) as web:
        clock = time.time() - time.monotonic()   # hit.at (monotonic) + clock = UNIX time
        overrides = [f"proxy={web.proxy_url}", f"frontier.url={redis_server.url}", "download_delay_s=0.3",
                     f"close_after_seconds={CLOSE_AFTER}", f"download_timeout_s={TIMEOUT}",
                     "frontier.lease_s=4", "frontier.renew_every_s=1", "warc.max_file_age_s=60"]
        for i in range(2):
            workers.append(start_worker(i, tmp_path, tmp_path / "seeds.txt", web.seeds, overrides))
        wait_all(workers, 60)
        exits = [time.time() - (time.monotonic() - w.ended) for w in workers]
        hits = web.hits.log()
    for w, exit_at in zip(workers, exits):
        assert w.returncode == 0, w.log[-3000:]
        stats = w.stats
        assert stats["finish_reason"] == "closespider_timeout", stats["finish_reason"]
        opened = dt.datetime.fromisoformat(stats["scrapy"]["start_time"]).timestamp()
        took = exit_at - opened
        assert took <= CLOSE_AFTER + TIMEOUT + SLACK, \
            f"worker {w.index} exited {took:.1f} s after its spider opened (close_after_seconds={CLOSE_AFTER}, " \
            f"download_timeout_s={TIMEOUT})"
        assert took >= CLOSE_AFTER - 0.5
        print(f"\nworker {w.index}: exited {took:.2f} s after its spider opened")
        assert not w.open_files(), f"worker {w.index} left {w.open_files()}"
        assert w.closed_files() and stats["warc_files"] == len(w.closed_files())
        for path in w.closed_files():
            assert read_warc(path)[0]["type"] == "warcinfo"
    # the deadline cut slow answers off: some request was still waiting for its answer at the first deadline
    first_deadline = min(dt.datetime.fromisoformat(w.stats["scrapy"]["start_time"]).timestamp()
                         for w in workers) + CLOSE_AFTER
    unanswered = [h for h in hits if h.status == 0 or (h.host.startswith("slow.") and h.target != "/robots.txt")]
    waiting = [h for h in unanswered if h.at + clock < first_deadline < h.at + clock + TIMEOUT]
    assert waiting, "no slow request was in flight at the deadline: the test did not test stopping on time"
    # ...and they ended by download_timeout_s after the deadline, not by their answers (30 s, never)
    timeouts = sum(w.stats["scrapy"].get("downloader/exception_type_count/scrapy.exceptions.DownloadTimeoutError", 0)
                   for w in workers)
    assert timeouts >= len(waiting)
