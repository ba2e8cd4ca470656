"""Benchmark: the Redis frontier's Lua scripts of a git revision against the working tree's, on one redis-server.

    .venv/bin/python bench/frontier_scripts_ab.py [--against HEAD~1] [--urls 10000] [--hosts 1000] [--runs 4]
                                                  [--arguments]

For changes to spider/frontier/lua/ whose effect (5-10 %) is smaller than this machine's run-to-run noise: the two
sets of scripts run the same workload alternately (old, new, new, old, ...) in one process against one
redis-server of the bench's own, each in a fresh namespace, --runs times each.  The workload is
bench/frontier_ops.py's: --urls new URLs over --hosts hosts added in batches of 200, the same URLs again (all
seen), then leased 32 at a time until none is left, each leased URL's `fetched` and `release_host` applied
together and each batch acknowledged.  The figure is the redis-server process's CPU (INFO cpu, user + sys) per URL
in each phase, which leaves out the clients and the CPU time the hypervisor takes from this machine (it counts in
INFO commandstats' times); the peek at every partition (peek.lua) is also given alone, and it is part of lease.
Prints every run, the medians, and new/old per phase.  The Python side (spider/frontier/redis_backend.py) is the
working tree's for both: a revision whose scripts take other arguments cannot be compared this way.

--arguments: first, what a redis.call costs by the form of its arguments (the figures in common.lua's int()):
each form runs 2,000 times in a loop inside one script, timed by INFO commandstats, best of 5.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import redis  # noqa: E402

import frontier_ops  # noqa: E402  (its workload: make_urls, open_frontier)
from spider.frontier import redis_backend  # noqa: E402
from tests.support.redisserver import RedisServer  # noqa: E402  (the tests' redis-server runner)

PHASES = ("add new", "add seen", "lease", "  of it peek", "fetched+release+ack")
LEASE_BATCH, ADD_BATCH, LEASE_S = 32, 200, 60.0


def scripts_at(revision: str, into: Path) -> Path:
    """spider/frontier/lua/ as it was at `revision`, written under `into`."""
    lua = redis_backend.LUA.relative_to(ROOT).as_posix()
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{revision}:{lua}"],
                           check=True, capture_output=True, text=True).stdout.split()
    for name in names:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{lua}/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (into / name).write_text(text)
    return into


def server_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def one_run(url: str, namespace: str, urls: list) -> list[float]:
    """Microseconds of redis-server CPU per URL in each of PHASES."""
    client = redis.Redis.from_url(url)
    f = frontier_ops.open_frontier(f"{url}#{namespace}")
    n = len(urls)
    marks = [server_cpu(client)]
    for expect in ("admitted", "seen"):
        frontier_ops.add_all(f, urls, ADD_BATCH, expect)
        marks.append(server_cpu(client))
    leased = lease = peek = cycle = 0.0
    while True:
        before, now = server_cpu(client), time.time()
        peeks = f._call(f._peeks(LEASE_BATCH, now))  # lease(), in its two steps, to weigh the peek alone
        peeked = server_cpu(client)
        got = f._lease(peeks, LEASE_BATCH, now, LEASE_S)
        leased_at = server_cpu(client)
        peek, lease = peek + peeked - before, lease + leased_at - before
        if not got:
            if f.pending(time.time()) == 0:
                break
            continue
        for item in got:
            t = time.time()
            f.apply([("fetched", ([item.id], t + LEASE_S)), ("release_host", (item.host, t, None, item.host_lease))])
        f.apply([("ack", ([item.id for item in got], None, time.time()))])
        cycle += server_cpu(client) - leased_at
        leased += len(got)
    if leased != n:
        raise SystemExit(f"{namespace}: leased {leased} of {n} URLs")
    f.clear()
    f.close()
    return [(marks[1] - marks[0]) * 1e6 / n, (marks[2] - marks[1]) * 1e6 / n, lease * 1e6 / n, peek * 1e6 / n,
            cycle * 1e6 / n]


ARGUMENT_FORMS = {  # name -> the loop's body; `base` is a number, S the offsets as strings, A as numbers
    "21 SETBIT, offset and bit numbers": "for i = 1, #A do redis.call('SETBIT', KEYS[1], base + A[i], 1) end",
    "21 SETBIT, offset number, bit '1'": "for i = 1, #A do redis.call('SETBIT', KEYS[1], base + A[i], '1') end",
    "21 SETBIT, offset int(), bit '1'":
        "for i = 1, #A do redis.call('SETBIT', KEYS[1], string.format('%d', base + A[i]), '1') end",
    "21 SETBIT, offset string, bit '1'": "for i = 1, #S do redis.call('SETBIT', KEYS[1], S[i], '1') end",
    "4 ZRANGEBYSCORE LIMIT, numbers":
        "for _, z in ipairs({'a', 'b', 'c', 'd'}) do redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 1) end",
    "4 ZRANGEBYSCORE LIMIT, strings": "for _, z in ipairs({'a', 'b', 'c', 'd'}) do "
                                      "redis.call('ZRANGEBYSCORE', z, '-inf', now_s, 'LIMIT', '0', '1') end",
    "tostring(number)": "local s = tostring(now + base)",
    "string.format('%d', number)": "local s = string.format('%d', now + base)",
}


def argument_forms(client: redis.Redis) -> None:
    offsets = [str(o) for o in range(7, 8320, 397)][:21]  # 21 offsets inside one 1,040-byte line
    client.set("ab:block", b"\0" * 65520)
    prelude = ("local S, A = {}, {} for i = 1, #ARGV do S[i] = ARGV[i]; A[i] = tonumber(ARGV[i]) end "
               "local now = 1764680000123 local now_s = '1764680000123' "
               "for n = 1, 2000 do local base = (n % 60) * 8320 ")
    print("\nwhat a redis.call costs by its arguments' form (us per loop iteration, best of 5; redis-server "
          f"{client.info('server')['redis_version']})")
    for name, body in ARGUMENT_FORMS.items():
        sha = client.script_load(prelude + body + " end return 1")
        best = float("inf")
        for _ in range(5):
            client.config_resetstat()
            client.evalsha(sha, 1, "ab:block", *offsets)
            best = min(best, client.info("commandstats")["cmdstat_evalsha"]["usec"] / 2000)
        print(f"  {name:40s} {best:7.2f}")
    client.delete("ab:block")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="HEAD~1", help="the git revision whose scripts are the baseline")
    ap.add_argument("--urls", type=int, default=10_000)
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=4, help="runs of each; 0: only --arguments")
    ap.add_argument("--arguments", action="store_true", help="first, the cost of a redis.call by argument form")
    args = ap.parse_args()
    new_dir = redis_backend.LUA
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "lua").mkdir()
        (Path(tmp) / "redis").mkdir()
        old_dir = scripts_at(args.against, Path(tmp) / "lua")
        server = RedisServer(Path(tmp) / "redis")
        server.start()
        try:
            print(f"redis-server on 127.0.0.1:{server.port}; {args.urls:,} URLs over {args.hosts:,} hosts; "
                  f"scripts of {args.against} (old) against the working tree's (new)")
            if args.arguments:
                argument_forms(redis.Redis.from_url(server.url))
            urls = frontier_ops.make_urls(args.urls, args.hosts)
            rows: dict[str, list[list[float]]] = {"old": [], "new": []}
            print(f"  {'':12s}" + "".join(f"{p:>22s}" for p in PHASES) + "   (redis-server CPU, us/URL)")
            for run in range(args.runs):
                order = (("old", old_dir), ("new", new_dir))
                for name, lua in order if run % 2 == 0 else order[::-1]:
                    redis_backend.LUA = lua  # read when a RedisFrontier is made
                    row = one_run(server.url, f"ab-{name}-{run}", urls)
                    rows[name].append(row)
                    print(f"  {name} run {run + 1:<4d}" + "".join(f"{v:22.1f}" for v in row), flush=True)
            redis_backend.LUA = new_dir
            if not args.runs:
                return
            medians = {name: [statistics.median(col) for col in zip(*r)] for name, r in rows.items()}
            print("\nSUMMARY (medians)")
            for name in ("old", "new"):
                print(f"  {name:12s}" + "".join(f"{v:22.1f}" for v in medians[name]))
            print(f"  {'new/old':12s}" + "".join(f"{n / o:22.3f}" for n, o in zip(medians["new"], medians["old"])))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
