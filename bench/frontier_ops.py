"""Benchmark: the frontier's operations per second and its memory on one Redis, against plain Redis lists.

    .venv/bin/python bench/frontier_ops.py [--urls 40000] [--hosts 1000] [--batch 200] [--lease-batch 32]
                                           [--clients 2] [--mem-urls 30000] [--fp-urls 20000]
                                           [--sim-urls 10000000] [--sim-tests 50000000] [--set-urls 1000000]
                                           [--only ops|memory]

Starts its own `redis-server` on a free loopback port (no persistence; killed at the end) and measures:

1. Operations per second, the scheduler's way (spider/frontier/scheduler.py), backends opened by
   `open_backend` from conf/crawl.yaml (16 partitions, its Bloom layout):
   - enqueue: `add()` of --urls new URLs over --hosts hosts, in batches of --batch; then the same URLs again,
     all "seen" (a crawl's common case: most links of a page are known already);
   - next: `lease(--lease-batch)` (frontier.buffer) with the clock running, so every released host is ready;
   - a full cycle per URL: lease, then `fetched([id])` and `release_host(host, now)` per URL (together, in one
     `apply`, as a scheduler tick applies one fetch's outcome), and `ack(ids)` per leased batch.
   "enqueue+next/s" = URLs / (time adding them + time leasing them); target >= 20,000/s on one Redis.
   Single client, then --clients processes sharing the frontier.  The baseline, same process, same
   payloads, same batching: what scrapy-redis's FIFO queue does, LPUSH of a batch and RPOP COUNT
   (--lease-batch); also with scrapy-redis's dupefilter (SADD per fingerprint, pipelined).  The same workload
   runs on the embedded SqliteFrontier (a temp file).  For Redis, the server's CPU (INFO cpu) and its time in
   Lua scripts (INFO commandstats) per URL against the client's wall time: what is the client and its round
   trips, what is Redis; and the commands the scripts call that cost most (calls per URL, microseconds a call).
   Then the payload-digest index (WARC revisit records): microseconds per record, one a call and in the WARC
   writer thread's batches.
2. Redis memory per 10 M *seen* URLs at FP 1e-6 (target <= 40 MB): a BloomLayout(10_000_000, 1e-6) in one
   partition, admitted through `add()` until every block of its first stage exists (a Bloom block is
   allocated whole when first touched, so from then on the filter does not grow up to its 10 M capacity):
   `MEMORY USAGE` summed over the `bf:` keys is the memory for 10 M.  The false-positive rate is measured on
   --fp-urls fresh URLs at the admitted count, and for the layout filled to 10 M (a numpy replica of its bit
   layout fed random hashes, --sim-urls; 0 skips).  Separately: bytes per *queued* URL (the `e` hash,
   per-host zsets and hashes), the default config's filter at 10 M URLs (the stages it grows to), and the
   baseline, a Redis SET of 16-byte fingerprints, measured at --set-urls and extrapolated to 10 M.  Last, what a
   fetched page's recrawl state adds to its URL record (conf/crawl_plan.yaml url_record_bytes).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from spider.config import load_crawl_config  # noqa: E402
from spider.frontier.backend import DigestSeen, NewUrl  # noqa: E402
from spider.frontier.bloom import BloomLayout, line_fp_rate, fingerprint, url_hashes  # noqa: E402
from spider.frontier import open_backend  # noqa: E402
from spider.frontier.scheduler import payload_of  # noqa: E402
from spider.warc_thread import BATCH  # noqa: E402
from tests.support.redisserver import RedisServer  # noqa: E402  (the tests' redis-server runner)

TARGET_OPS = 20_000        # enqueue+next per second on one Redis
TARGET_BYTES = 40_000_000  # Redis memory per 10 M seen URLs at FP 1e-6
TEN_M = 10_000_000
LEASE_S = 60.0


# --- a redis-server of our own -------------------------------------------------------------------------
# --- the workload --------------------------------------------------------------------------------------
def make_urls(n: int, hosts: int, tag: str = "p") -> list[NewUrl]:
    """n new URLs round-robin over `hosts` hosts, as the scheduler builds them (fingerprint, 3 hashes, JSON)."""
    out = []
    for i in range(n):
        host = f"h{i % hosts:05d}.bench.test"
        depth = 1 + (i // hosts) % 4
        url = f"http://{host}/{tag}{i % 7}/page-{i}.html"
        key = fingerprint(url)
        payload = payload_of(url, {"depth": depth, "weblm_parent": f"http://{host}/"})
        out.append(NewUrl(key.hex(), host, url, -depth, payload, url_hashes(key)))
    return out


URLS: list[NewUrl] = []  # set before the client processes fork: they read their slice from here


def open_frontier(spec: str):
    """spec: a frontier.url plus a namespace, 'redis://...#ns' or 'sqlite:///path'."""
    url, _, namespace = spec.partition("#")
    overrides = [f"frontier.url={url}"] + ([f"frontier.namespace={namespace}"] if namespace else [])
    return open_backend(load_crawl_config(overrides), tempfile.gettempdir())


class Counted:
    """Counts a RedisFrontier's round trips (each `_send` is one pipeline) and the commands in them."""

    def __init__(self, frontier):
        self.trips = self.commands = 0
        if hasattr(frontier, "_send"):
            send = frontier._send

            def counted_send(commands):
                self.trips += 1
                self.commands += len(commands)
                return send(commands)
            frontier._send = counted_send


def add_all(f, urls: list[NewUrl], batch: int, expect: str = "admitted") -> float:
    """Offer every URL in batches, each expected to come out `expect`: "admitted" the first time, "seen" when
    offered again (a crawl's common case: most links on a page are known)."""
    started = time.perf_counter()
    for i in range(0, len(urls), batch):
        outcomes = f.add(urls[i:i + batch], time.time(), 0)
        if outcomes.count(expect) != len(outcomes):
            raise SystemExit(f"add(): expected every URL {expect}, got {set(outcomes)}")
    return time.perf_counter() - started


def drain(f, lease_batch: int, probe=None) -> tuple[int, float, float]:
    """Lease until the frontier is empty; per leased URL fetched() and release_host() (host ready again at
    once) together, ack() per batch.  Returns (URLs leased, seconds in lease(), seconds in all).  `probe()`, when given,
    is read before and after each lease() (outside every timing) and its differences summed in probe.total."""
    n, in_lease, probing, started = 0, 0.0, 0.0, time.perf_counter()
    while True:
        t0 = time.perf_counter()
        before = probe() if probe else 0.0
        t1 = time.perf_counter()
        got = f.lease(lease_batch, time.time(), LEASE_S)
        t2 = time.perf_counter()
        in_lease += t2 - t1
        if probe:
            probe.total += probe() - before
            probing += (t1 - t0) + (time.perf_counter() - t2)
        if not got:
            if f.pending(time.time()) == 0:
                break
            time.sleep(0.0005)  # every host with URLs is busy in another client
            continue
        for item in got:  # a fetch's outcome, applied as a scheduler tick applies it (FrontierBackend.apply)
            now = time.time()
            f.apply([("fetched", ([item.id], now + LEASE_S)),
                     ("release_host", (item.host, now, None, item.host_lease))])
        f.apply([("ack", ([item.id for item in got], None, time.time()))])
        n += len(got)
    return n, in_lease, time.perf_counter() - started - probing


def client_main(kind: str, spec: str, index: int, clients: int, batch: int, lease_batch: int,
                barrier, results) -> None:
    """One client process: its slice of URLS added, then the shared queue drained, phases fenced by barriers."""
    mine = URLS[index::clients]
    if kind == "frontier":
        f = open_frontier(spec)
        barrier.wait()
        t0 = time.perf_counter()
        add_all(f, mine, batch)
        t1 = time.perf_counter()
        barrier.wait()
        t2 = time.perf_counter()
        n, in_lease, _ = drain(f, lease_batch)
        t3 = time.perf_counter()
        f.close()
    else:
        client = redis.Redis.from_url(spec)
        barrier.wait()
        t0 = time.perf_counter()
        push_all(client, mine, batch, kind == "dedup")
        t1 = time.perf_counter()
        barrier.wait()
        t2 = time.perf_counter()
        n = pop_all(client, lease_batch)
        t3 = time.perf_counter()
        in_lease = t3 - t2
    results.put({"t0": t0, "t1": t1, "t2": t2, "t3": t3, "n": n, "in_lease": in_lease, "drain": t3 - t2})


# --- the baseline: scrapy-redis's FIFO queue (and its dupefilter) ----------------------------------------
QUEUE, DUPES = "bench:queue", "bench:dupefilter"


def push_all(client: redis.Redis, urls: list[NewUrl], batch: int, dedup: bool) -> float:
    started = time.perf_counter()
    for i in range(0, len(urls), batch):
        chunk = urls[i:i + batch]
        if dedup:
            pipe = client.pipeline(transaction=False)
            for u in chunk:
                pipe.sadd(DUPES, u.id)
            chunk = [u for u, added in zip(chunk, pipe.execute()) if added]
        if chunk:
            client.lpush(QUEUE, *[u.payload for u in chunk])
    return time.perf_counter() - started


def pop_all(client: redis.Redis, count: int) -> int:
    n = 0
    while True:
        got = client.rpop(QUEUE, count)
        if not got:
            return n
        n += len(got)


# --- running the variants ------------------------------------------------------------------------------
def run_single(kind: str, spec: str, args, redis_client: redis.Redis | None) -> dict:
    urls = URLS
    stats_before, called_before = _redis_usec(redis_client), _commands(redis_client)
    if kind == "frontier":
        f = open_frontier(spec)
        f.clear()
        counted = Counted(f)
        add_s = add_all(f, urls, args.batch)
        trips_add, commands_add = counted.trips, counted.commands
        stats_mid, called_mid = _redis_usec(redis_client), _commands(redis_client)
        seen_s = add_all(f, urls, args.batch, expect="seen")
        stats_seen, called_seen = _redis_usec(redis_client), _commands(redis_client)
        probe = None
        if redis_client is not None:
            def probe() -> float:
                return redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0) / 1e6
            probe.total = 0.0
        trips_before, commands_before = counted.trips, counted.commands
        n, lease_s, drain_s = drain(f, args.lease_batch, probe)
        stats_after = _redis_usec(redis_client)
        if redis_client is not None:
            costs = {"add": _command_costs(called_before, called_mid, len(urls)),
                     "cycle": _command_costs(called_seen, _commands(redis_client), len(urls))}
        left = f.counts(time.time())
        f.close()
        if n != len(urls) or left.get("queued") or left.get("leased") or left.get("held"):
            raise SystemExit(f"{spec}: leased {n} of {len(urls)} URLs; left {left}")
        out = {"add_s": add_s, "lease_s": lease_s, "drain_s": drain_s, "seen_s": seen_s,
               "trips_add": trips_add, "commands_add": commands_add, "trips_cycle": counted.trips - trips_before,
               "commands_cycle": counted.commands - commands_before, "lua_lease_s": probe.total if probe else 0.0,
               "command_costs": costs if redis_client is not None else {}}
    else:
        redis_client.delete(QUEUE, DUPES)
        add_s = push_all(redis_client, urls, args.batch, kind == "dedup")
        stats_mid = _redis_usec(redis_client)
        if kind == "dedup":  # the same URLs again: all duplicates, nothing pushed
            started = time.perf_counter()
            push_all(redis_client, urls, args.batch, True)
            seen_s = time.perf_counter() - started
        stats_seen = _redis_usec(redis_client)
        started = time.perf_counter()
        n = pop_all(redis_client, args.lease_batch)
        lease_s = drain_s = time.perf_counter() - started
        stats_after = _redis_usec(redis_client)
        out = {"add_s": add_s, "lease_s": lease_s, "drain_s": drain_s}
        if kind == "dedup":
            out["seen_s"] = seen_s
        if n != len(urls):
            raise SystemExit(f"baseline {kind}: popped {n} of {len(urls)}")
    if redis_client is not None:
        out["redis_add_s"], out["lua_add_s"] = (b - a for a, b in zip(stats_before, stats_mid))
        out["redis_cycle_s"], out["lua_cycle_s"] = (b - a for a, b in zip(stats_seen, stats_after))
        out["redis_seen_s"], out["lua_seen_s"] = (b - a for a, b in zip(stats_mid, stats_seen))
    return _rates(out, len(urls))


def run_multi(kind: str, spec: str, args, redis_client: redis.Redis | None) -> dict:
    if kind == "frontier":
        f = open_frontier(spec)
        f.clear()
        f.close()
    else:
        redis_client.delete(QUEUE, DUPES)
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(args.clients), ctx.Queue()
    procs = [ctx.Process(target=client_main, args=(kind, spec, i, args.clients, args.batch, args.lease_batch,
                                                   barrier, results)) for i in range(args.clients)]
    for p in procs:
        p.start()
    rows = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"{kind} client exited {p.exitcode}")
    n = sum(r["n"] for r in rows)
    if n != len(URLS):
        raise SystemExit(f"{kind} x{args.clients}: drained {n} of {len(URLS)} URLs")
    add_s = max(r["t1"] for r in rows) - min(r["t0"] for r in rows)
    drain_s = max(r["t3"] for r in rows) - min(r["t2"] for r in rows)
    # the clients lease in parallel: lease()'s share of the drain's wall time is their share of time in lease()
    share = sum(r["in_lease"] for r in rows) / max(1e-9, sum(r["drain"] for r in rows))
    return _rates({"add_s": add_s, "lease_s": drain_s * share, "drain_s": drain_s}, n)


def _rates(out: dict, n: int) -> dict:
    out["n"] = n
    out["add_per_s"] = n / out["add_s"]
    out["lease_per_s"] = n / out["lease_s"]
    out["cycle_per_s"] = n / out["drain_s"]
    out["enqueue_next_per_s"] = n / (out["add_s"] + out["lease_s"])
    out["enqueue_cycle_per_s"] = n / (out["add_s"] + out["drain_s"])
    out["seen_per_s"] = n / out["seen_s"] if "seen_s" in out else None
    return out


def _commands(client: redis.Redis | None) -> dict[str, tuple[int, int]]:
    """Per command the scripts call (SETBIT, ZADD, ...): (calls, microseconds) so far, from INFO commandstats."""
    if client is None:
        return {}
    return {name.removeprefix("cmdstat_").upper(): (v["calls"], v["usec"])
            for name, v in client.info("commandstats").items()
            if name not in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_info", "cmdstat_config|resetstat")}


def _command_costs(before: dict, after: dict, n: int, top: int = 5) -> str:
    """The commands that cost the scripts most between two `_commands` readings: calls per URL, us per call."""
    spent = {name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
             for name, (calls, usec) in after.items()}
    rows = sorted(((usec, calls, name) for name, (calls, usec) in spent.items() if calls), reverse=True)[:top]
    total = sum(usec for usec, _, _ in rows)
    return (", ".join(f"{name} {calls / n:.2f}/URL x {usec / calls:.2f} us" for usec, calls, name in rows)
            + f" (these {total / n:.1f} us/URL; the rest of the Lua time is the scripts' own code and calls)")


def _redis_usec(client: redis.Redis | None) -> tuple[float, float]:
    """(CPU seconds of the redis-server process so far, seconds inside EVALSHA so far): the server's whole cost
    (parsing, replies, sockets included) and its Lua scripts' share."""
    if client is None:
        return 0.0, 0.0
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    return (cpu["used_cpu_user"] + cpu["used_cpu_sys"],
            sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval")) / 1e6)


def ops_section(args, port: int, tmp: Path) -> dict:
    global URLS
    URLS = make_urls(args.urls, args.hosts)
    plain = redis.Redis(port=port)
    cfg = load_crawl_config([])
    print(f"== 1. frontier operations: {args.urls:,} URLs over {args.hosts:,} hosts, add() batches of {args.batch}, "
          f"lease({args.lease_batch}); {cfg.frontier.partitions} partitions; {os.cpu_count()} CPU core(s)", flush=True)
    redis_url = f"redis://127.0.0.1:{port}/0"
    rows: dict[str, dict] = {}
    plan = [("baseline: LPUSH/RPOP (scrapy-redis FIFO)", "plain", redis_url, plain),
            ("baseline: + SADD dupefilter", "dedup", redis_url, plain),
            ("RedisFrontier", "frontier", redis_url + "#benchops", plain),
            ("SqliteFrontier (embedded)", "frontier", f"sqlite:///{tmp / 'ops.db'}", None)]
    for name, kind, spec, client in plan:
        rows[f"{name} x1"] = run_single(kind, spec, args, client)
        _print_row(f"{name} x1", rows[f"{name} x1"])
        if args.clients > 1:
            if kind == "frontier" and spec.startswith("sqlite"):
                spec = f"sqlite:///{tmp / 'ops-multi.db'}"
            rows[f"{name} x{args.clients}"] = run_multi(kind, spec, args, client)
            _print_row(f"{name} x{args.clients}", rows[f"{name} x{args.clients}"])
    single = rows["RedisFrontier x1"]
    n = single["n"]
    print("\n  RedisFrontier x1, where the time goes (redis-server CPU from INFO cpu, Lua from INFO commandstats):")
    for phase, wall_key in (("add", "add_s"), ("seen", "seen_s"), ("cycle", "drain_s")):
        wall = single[wall_key]
        server, lua = single[f"redis_{phase}_s"], single[f"lua_{phase}_s"]
        label = {"add": "add (new)", "seen": "add (seen)", "cycle": "full cycle"}[phase]
        print(f"    {label:10s}: {wall / n * 1e6:6.1f} us/URL client wall; redis-server CPU {server / n * 1e6:5.1f} "
              f"us/URL ({server / wall:4.0%} of the wall), Lua scripts {lua / n * 1e6:5.1f} us/URL"
              + (f"; {single['trips_add'] / n:.3f} round trips/URL, {single['commands_add'] / n:.3f} commands/URL"
                 if phase == "add" else "")
              + (f"; {single['trips_cycle'] / n:.2f} round trips/URL, {single['commands_cycle'] / n:.2f} commands/URL "
                 f"({cfg.frontier.partitions} partitions)" if phase == "cycle" else ""))
    for phase, label in (("add", "add (new)"), ("cycle", "full cycle")):
        print(f"    the commands its scripts called most, {label}: {single['command_costs'][phase]}")
    print(f"    of the cycle, lease(): {single['lease_s'] / n * 1e6:6.1f} us/URL client wall, Lua "
          f"{single['lua_lease_s'] / n * 1e6:5.1f} us/URL; the rest is fetched() + release_host() per URL, ack() per "
          f"batch")
    base = rows["baseline: LPUSH/RPOP (scrapy-redis FIFO) x1"]
    print(f"    baseline LPUSH/RPOP: redis-server busy {(base['redis_add_s'] + base['redis_cycle_s']) / n * 1e6:.1f} "
          f"us/URL for push + pop")
    digest_lookups([("RedisFrontier", redis_url + "#benchdigests"), ("SqliteFrontier", f"sqlite:///{tmp / 'dg.db'}")],
                   args.urls // 2)
    return rows


def digest_lookups(specs: list[tuple[str, str]], n: int) -> None:
    """The payload-digest index (WARC revisits): `digest_firsts` one record a call, then in the WARC writer thread's
    batches (spider/warc_thread.py: what is queued, up to BATCH), n new digests each."""
    print(f"\n  payload-digest index, {n:,} new digests each way: one a call, then {BATCH} a call (the WARC "
          f"writer's batch)")
    for name, spec in specs:
        f = open_frontier(spec)
        items = [(f"sha1:{tag}{i}", DigestSeen(f"http://d.test/{i}", "2026-01-01T00:00:00Z", f"<urn:uuid:{tag}{i}>"))
                 for tag in "ab" for i in range(n)]
        started = time.perf_counter()
        for item in items[:n]:
            f.digest_firsts([item])
        one = (time.perf_counter() - started) / n
        started = time.perf_counter()
        for i in range(n, 2 * n, BATCH):
            f.digest_firsts(items[i:i + BATCH])
        batched = (time.perf_counter() - started) / n
        f.close()
        print(f"    {name:15s} one a call {one * 1e6:6.1f} us/record, batched {batched * 1e6:6.1f} us/record: "
              f"{one / batched:.1f}x")


def _print_row(name: str, r: dict) -> None:
    seen = f"{r['seen_per_s']:9,.0f}/s" if r.get("seen_per_s") else "        -  "
    print(f"  {name:44s} add {r['add_per_s']:8,.0f}/s  re-add seen {seen}  lease {r['lease_per_s']:8,.0f}/s  "
          f"full cycle {r['cycle_per_s']:8,.0f}/s  enqueue+next {r['enqueue_next_per_s']:8,.0f}/s  "
          f"enqueue+cycle {r['enqueue_cycle_per_s']:8,.0f}/s", flush=True)


# --- 2. memory -----------------------------------------------------------------------------------------
def memory_usage(client: redis.Redis, keys: list[bytes]) -> int:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return sum(v or 0 for v in pipe.execute())


def memory_section(args, port: int) -> dict:
    from spider.frontier.redis_backend import RedisFrontier

    client = redis.Redis(port=port)
    client.flushall()
    layout = BloomLayout(TEN_M, 1e-6)
    stage = layout.stages[0]
    print(f"\n== 2. Redis memory per 10 M seen URLs at FP 1e-6: BloomLayout(10_000_000, 1e-6), 1 partition: stage 0 "
          f"{stage.blocks} blocks of {layout.block_bytes} B in {stage.lines} lines each, k={stage.k}, "
          f"fp {stage.fp_rate:.1e} "
          f"({stage.bytes / 1e6:.2f} MB of bits)", flush=True)
    f = RedisFrontier(f"redis://127.0.0.1:{port}/0", "benchmem", 1, layout)
    prefix = f.prefix(0)
    used0 = int(client.info("memory")["used_memory"])
    urls = make_urls(args.mem_urls, args.hosts, tag="m")
    add_all(f, urls, args.batch)
    admitted = len(urls)
    bf_keys = list(client.scan_iter(match=prefix + "bf:*", count=1000))
    while len(bf_keys) < stage.blocks and admitted < 20 * args.mem_urls:  # not every block touched yet: more
        more = make_urls(args.mem_urls, args.hosts, tag=f"m{admitted}-")
        add_all(f, more, args.batch)
        admitted += len(more)
        bf_keys = list(client.scan_iter(match=prefix + "bf:*", count=1000))
    used1 = int(client.info("memory")["used_memory"])
    bloom_bytes = memory_usage(client, bf_keys)
    other_keys = [k for k in client.scan_iter(match=prefix + "*", count=1000) if not k.startswith((prefix + "bf:").encode())]
    queue_bytes = memory_usage(client, other_keys)
    e_bytes = memory_usage(client, [(prefix + "e").encode()])
    q_bytes = memory_usage(client, [k for k in other_keys if k.startswith((prefix + "q:").encode())])
    h_bytes = memory_usage(client, [k for k in other_keys if k.startswith((prefix + "h:").encode())])
    per_block = bloom_bytes / max(1, len(bf_keys))
    every = len(bf_keys) == stage.blocks
    print(f"  admitted {admitted:,} URLs through add(): {len(bf_keys)}/{stage.blocks} Bloom blocks exist"
          f"{'' if every else ' (NOT all: the figure below is a lower bound)'}; "
          f"used_memory {used0 / 1e6:.1f} -> {used1 / 1e6:.1f} MB")
    print(f"  Bloom filter (MEMORY USAGE over the bf: keys) = memory at 10 M seen URLs: {bloom_bytes:,} B = "
          f"{bloom_bytes / 1e6:.2f} MB ({bloom_bytes / 2**20:.2f} MiB), {per_block:,.0f} B per block, "
          f"{bloom_bytes * 8 / TEN_M:.1f} bits/URL  (target <= {TARGET_BYTES / 1e6:.0f} MB: "
          f"{'met' if bloom_bytes <= TARGET_BYTES and every else 'MISSED'})")

    fresh = make_urls(args.fp_urls, args.hosts, tag="fresh")
    seen = 0
    for i in range(0, len(fresh), args.batch):
        seen += f.add(fresh[i:i + args.batch], time.time(), 0).count("seen")
    print(f"  false positives at {admitted:,} admitted: {seen} of {len(fresh):,} fresh URLs said 'seen' "
          f"(expected {_fp_theory(stage, admitted) * len(fresh):.2g})")
    sim = simulate(stage, args.sim_urls, args.sim_tests) if args.sim_urls else None
    if sim is not None:
        rate = sim["hits"] / sim["tests"]
        low, high = _poisson_95(sim["hits"])
        print(f"  layout filled to {args.sim_urls:,} URLs (numpy replica of stage 0's blocked layout, its "
              f"{sim['hashing']} hashing checked against Stage.positions, random hashes): {sim['fill']:.4f} of "
              f"bits set; FP from the lines' fill alone "
              f"{sim['fp_fill']:.2e} (model {_fp_theory(stage, args.sim_urls):.2e}), sampled {sim['hits']} of "
              f"{sim['tests']:,} fresh = {rate:.2e} (95 %: {low / sim['tests']:.1e}..{high / sim['tests']:.1e}); "
              f"against stage 0's share {stage.fp_rate:.0e}: {_verdict(low, high, sim['tests'], stage.fp_rate)}, against "
              f"the whole filter's bound {layout.fp_rate:.0e}: {_verdict(low, high, sim['tests'], layout.fp_rate)}")

    queued = admitted + len(fresh) - seen
    print(f"  queued URLs (not the target's subject: it is about seen URLs): {queue_bytes:,} B for {queued:,} queued "
          f"URLs over {args.hosts:,} hosts = {queue_bytes / queued:.0f} B/URL (e hash {e_bytes / queued:.0f}, "
          f"q:<host> zsets {q_bytes / queued:.0f}, h:<host> hashes {h_bytes / queued:.0f}); at 10 M queued: "
          f"{queue_bytes / queued * TEN_M / 1e9:.2f} GB")
    f.close()

    default = default_layout_at_10m(per_block)
    set_bytes = set_baseline(client, args.set_urls)
    print(f"  baseline: Redis SET of {args.set_urls:,} 16-byte fingerprints (SADD): {set_bytes:,} B = "
          f"{set_bytes / args.set_urls:.1f} B/URL -> 10 M: {set_bytes / args.set_urls * TEN_M / 1e6:.0f} MB "
          f"(linear; a set's bucket array doubles, so the real 10 M figure is a little higher)")
    print(f"  ratio Bloom(10 M, 1e-6)/SET at 10 M: {bloom_bytes / (set_bytes / args.set_urls * TEN_M):.3f}; "
          f"default config at 10 M/SET: {default / (set_bytes / args.set_urls * TEN_M):.3f}")
    client.flushall()
    recrawl_state_bytes(client, port, args)
    return {"bloom_bytes": bloom_bytes, "every_block": every, "default_bytes": default}


def recrawl_state_bytes(client: redis.Redis, port: int, args) -> None:
    """What a fetched page's recrawl state (spider/frontier/recrawl.py: validators, body digest, interval, the capture
    a 304 refers to) adds to its URL record: the same --mem-urls URLs queued with their plain payloads, then with the
    state a recrawl carries; MEMORY USAGE over the non-Bloom keys (conf/crawl_plan.yaml url_record_bytes)."""
    import dataclasses

    from spider.frontier import recrawl
    from spider.frontier.redis_backend import RedisFrontier

    settings = load_crawl_config(["frontier.adaptive_recrawl=true"]).frontier
    validators = {"etag": '"5f3a-61c2b8e4d1a40"', "last-modified": "Tue, 01 Dec 2026 10:00:00 GMT"}
    state = recrawl.observe(None, 200, validators, b"page", 2592000.0, settings)   # as the scheduler keeps it
    state.pop("changed")
    state[recrawl.CAPTURE] = recrawl.capture("2026-12-04T19:16:08.201768Z",
                                             "<urn:uuid:c805281a-cad8-4e5f-a8dd-7b9b1e6c280e>", "u", "u")
    # the same state as the scheduler wrote it before 2026-12-05: long keys, the interval a float, spaced JSON
    before = {"etag": validators["etag"], "last_modified": validators["last-modified"],
              "digest": state[recrawl.DIGEST], "interval": 2592000.0, "capture": state[recrawl.CAPTURE]}

    def carrying(url: NewUrl, kept: dict = state, encode=payload_of) -> NewUrl:
        payload = json.loads(url.payload)
        return dataclasses.replace(url, payload=encode(payload["url"], {**payload["meta"], recrawl.META_KEY: kept}))

    spaced = lambda url, meta: json.dumps({"url": url, "meta": meta})
    rows = []
    for name, change in (("plain payload", lambda u: u), ("with the recrawl state", carrying),
                         ("as written before 2026-12-05", lambda u: carrying(u, before, spaced))):
        client.flushall()
        f = RedisFrontier(f"redis://127.0.0.1:{port}/0", "benchrec", 1, BloomLayout(TEN_M, 1e-6))
        urls = [change(u) for u in make_urls(args.mem_urls, args.hosts, tag="r")]
        add_all(f, urls, args.batch)
        prefix = f.prefix(0)
        keys = [k for k in client.scan_iter(match=prefix + "*", count=1000)
                if not k.startswith((prefix + "bf:").encode())]
        rows.append((name, sum(len(u.payload) for u in urls) / len(urls), memory_usage(client, keys) / len(urls)))
        f.close()
    client.flushall()
    print(f"  URL record, {args.mem_urls:,} queued URLs: " + "; ".join(
        f"{name}: {payload:.0f}-B payload, {record:.0f} B/URL" for name, payload, record in rows)
        + f"; the recrawl state adds {rows[1][2] - rows[0][2]:.0f} B a record; a recrawled URL's record "
        f"{rows[1][2]:.0f} B against {rows[2][2]:.0f} B as written before ({rows[1][2] / rows[2][2]:.3f}x)")


def default_layout_at_10m(per_block: float) -> int:
    """conf/crawl.yaml's filter at 10 M URLs: open_backend gives each partition BloomLayout(capacity // partitions)."""
    f = load_crawl_config([]).frontier
    layout = BloomLayout(max(1, f.bloom_capacity // f.partitions), f.bloom_fp_rate)
    per_partition = TEN_M // f.partitions
    last = layout.stage_for(per_partition - 1)
    print(f"  default config (conf/crawl.yaml): bloom_capacity={f.bloom_capacity:,}, partitions={f.partitions}, "
          f"fp {f.bloom_fp_rate:g} -> per partition BloomLayout({layout.capacity:,}); at 10 M URLs "
          f"({per_partition:,} per partition, spread evenly) it grows to stage {last}:")
    total, before = 0, 0
    for i, stage in enumerate(layout.stages[:last + 1]):
        in_stage = min(stage.capacity, per_partition - before)
        before += stage.capacity
        size = stage.blocks * per_block * f.partitions
        total += size
        print(f"    stage {i}: capacity {stage.capacity:>9,} fp {stage.fp_rate:.2e} k={stage.k:2d} "
              f"{stage.blocks:4d} blocks/partition, holds {in_stage:>9,}: {size / 1e6:6.2f} MB over {f.partitions} "
              f"partitions")
    print(f"    total {total / 1e6:.2f} MB at 10 M URLs (target <= {TARGET_BYTES / 1e6:.0f} MB: "
          f"{'met' if total <= TARGET_BYTES else 'MISSED'}); with bloom_capacity=10,000,000 it would be one stage: "
          f"{BloomLayout(TEN_M // f.partitions, f.bloom_fp_rate).stages[0].blocks * per_block * f.partitions / 1e6:.2f}"
          f" MB")
    embedded = BloomLayout(f.bloom_capacity, f.bloom_fp_rate)
    last = embedded.stage_for(TEN_M - 1)
    print(f"    (embedded, one BloomLayout({f.bloom_capacity:,}): stages 0..{last}, "
          f"{sum(s.bytes for s in embedded.stages[:last + 1]) / 1e6:.2f} MB of blocks in SQLite at 10 M)")
    return int(total)


def set_baseline(client: redis.Redis, n: int) -> int:
    import hashlib

    client.flushall()
    before = int(client.info("memory")["used_memory"])
    key = "bench:fingerprints"
    pipe = client.pipeline(transaction=False)
    for start in range(0, n, 1000):
        pipe.sadd(key, *[hashlib.blake2b(str(i).encode(), digest_size=16).digest()
                         for i in range(start, min(n, start + 1000))])
        if len(pipe) >= 50:
            pipe.execute()
    pipe.execute()
    after = int(client.info("memory")["used_memory"])
    usage = client.memory_usage(key, samples=0) or 0
    return max(after - before, usage)


def _verdict(low: float, high: float, tests: int, bound: float) -> str:
    return "within" if high / tests <= bound else "ABOVE" if low / tests > bound else "not told apart at this sample"


def _poisson_95(k: int) -> tuple[float, float]:
    """A rough 95 % interval for a Poisson count (normal approximation with a continuity margin)."""
    import math
    return max(0.0, k - 1.96 * math.sqrt(k) - 1), k + 1.96 * math.sqrt(k) + 2


def _fp_theory(stage, n: int) -> float:
    """The layout's model: each line's load Poisson, the textbook rate at each load (spider/frontier/bloom.py)."""
    return line_fp_rate(stage.blocks * stage.block_bits / n, stage.line_bits, stage.k)


def simulate(stage, n: int, tests: int) -> dict | None:
    """Stage 0's blocked layout filled with n random hashes in numpy, its FP from the fill of each line and by
    sampling fresh hashes.  The numpy replica of Stage.positions is checked against it first (plain or enhanced
    double hashing, or enhanced triple hashing); a layout it does not replicate is skipped."""
    try:
        import numpy as np
    except ImportError:
        print("  (numpy absent: the 10 M fill is skipped)")
        return None
    m, ks = stage.line_bits, np.arange(stage.k, dtype=np.int64)

    def plain(h):  # block a % blocks, bits (b + i * (c | 1)) % m
        return (h[:, 1, None] + ks[None, :] * (h[:, 2, None] | 1)) % m

    def enhanced(h):  # x = b, y = c; each bit: x, then x += y, y += i + 1 (mod m): the layout before lines
        x, y, cols = h[:, 1] % m, h[:, 2] % m, []
        for i in range(stage.k):
            cols.append(x)
            x, y = (x + y) % m, (y + i + 1) % m
        return np.stack(cols, axis=1)

    def triple(h):  # in line d % lines: x = b, y = c, z = d // lines; each bit: x, then x += y, y += z, z += i + 1
        x, y, z, cols = h[:, 1] % m, h[:, 2] % m, h[:, 3] // stage.lines % m, []
        for i in range(stage.k):
            cols.append(x)
            x, y, z = (x + y) % m, (y + z) % m, (z + i + 1) % m
        return (h[:, 3] % stage.lines * m)[:, None] + np.stack(cols, axis=1)

    rng = np.random.default_rng(20240601)
    probe = rng.integers(0, 1 << 26, size=(200, 4), dtype=np.int64)
    want = [stage.positions(tuple(int(v) for v in row)) for row in probe]
    offsets = next((f for f in (plain, enhanced, triple) if all(
        block == int(row[0]) % stage.blocks and bits == [int(v) for v in got]
        for (block, bits), row, got in zip(want, probe, f(probe)))), None)
    if offsets is None:
        print("  (Stage.positions is not one of the replicas: the 10 M fill is skipped)")
        return None

    def positions(count: int):
        h = rng.integers(0, 1 << 26, size=(count, 4), dtype=np.int64)
        return ((h[:, 0] % stage.blocks)[:, None] * stage.block_bits + offsets(h)).ravel()

    bits = np.zeros(stage.blocks * stage.block_bits, dtype=bool)
    chunk = 1 << 19
    for start in range(0, n, chunk):
        bits[positions(min(chunk, n - start))] = True
    fill = bits.reshape(stage.blocks * stage.lines, m).mean(axis=1)
    hits = 0
    for start in range(0, tests, chunk):
        count = min(chunk, tests - start)
        hits += int(bits[positions(count)].reshape(count, stage.k).all(axis=1).sum())
    return {"fill": float(fill.mean()), "fp_fill": float((fill ** stage.k).mean()), "hits": hits, "tests": tests,
            "hashing": offsets.__name__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=40_000, help="URLs added then drained per variant")
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=200, help="URLs per add() (the scheduler: one tick's worth)")
    parser.add_argument("--lease-batch", type=int, default=32, help="lease()'s max_urls (frontier.buffer)")
    parser.add_argument("--clients", type=int, default=2, help="client processes in the multi-client runs")
    parser.add_argument("--mem-urls", type=int, default=30_000, help="URLs admitted for the memory measure")
    parser.add_argument("--fp-urls", type=int, default=20_000, help="fresh URLs tested for false positives")
    parser.add_argument("--sim-urls", type=int, default=TEN_M, help="URLs in the numpy fill (0: skip)")
    parser.add_argument("--sim-tests", type=int, default=50_000_000, help="fresh hash triples tested in the fill")
    parser.add_argument("--set-urls", type=int, default=1_000_000, help="fingerprints in the SET baseline")
    parser.add_argument("--only", choices=("ops", "memory"))
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="frontier-ops-"))
    server = RedisServer(tmp / "redis")
    port = server.port
    started = time.perf_counter()
    try:
        version = redis.Redis(port=port).info("server")["redis_version"]
        print(f"redis-server {version} on 127.0.0.1:{port} (--save '' --appendonly no), redis-py {redis.__version__}")
        rows = ops_section(args, port, tmp) if args.only != "memory" else {}
        mem = memory_section(args, port) if args.only != "ops" else {}
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nSUMMARY ({time.perf_counter() - started:.0f} s)")
    if rows:
        base = rows["baseline: LPUSH/RPOP (scrapy-redis FIFO) x1"]["enqueue_next_per_s"]
        dedup = rows["baseline: + SADD dupefilter x1"]["enqueue_next_per_s"]
        best = max(v["enqueue_next_per_s"] for k, v in rows.items() if k.startswith("RedisFrontier"))
        for name in [k for k in rows if k.startswith(("RedisFrontier", "SqliteFrontier"))]:
            r = rows[name]
            print(f"  {name:32s} enqueue+next {r['enqueue_next_per_s']:8,.0f}/s  ratio vs LPUSH/RPOP "
                  f"{r['enqueue_next_per_s'] / base:.3f}, vs SADD+LPUSH/RPOP {r['enqueue_next_per_s'] / dedup:.3f}")
        print(f"  RedisFrontier enqueue+next, best: {best:,.0f}/s (target >= {TARGET_OPS:,}/s on one Redis: "
              f"{'met' if best >= TARGET_OPS else 'MISSED'})")
    if mem:
        print(f"  Bloom filter at 10 M seen URLs, FP 1e-6: {mem['bloom_bytes'] / 1e6:.2f} MB (target <= "
              f"{TARGET_BYTES / 1e6:.0f} MB: {'met' if mem['bloom_bytes'] <= TARGET_BYTES and mem['every_block'] else 'MISSED'}); "
              f"default conf/crawl.yaml layout at 10 M: {mem['default_bytes'] / 1e6:.2f} MB "
              f"({'met' if mem['default_bytes'] <= TARGET_BYTES else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
