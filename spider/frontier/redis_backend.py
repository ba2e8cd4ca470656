"""The frontier over Redis (one server or Redis Cluster): any number of workers share one crawl.

Hosts are spread over `partitions` by jump consistent hash; every key of a partition carries the hash tag
`{<partition>}`, so each Lua script (spider/frontier/lua/) touches one slot and the same code runs on Redis
Cluster.  A partition holds, under `<namespace>:{p}:`:

    e         hash   id -> {h: host, s: score, p: payload}   every queued, leased, held or due URL
    q:<host>  zset   id by score (minus priority x 1e10, plus an insertion sequence: FIFO among equals)
    ready     zset   host by next-allowed time (hosts with URLs queued and no fetch in flight)
    busy      zset   host by its lease's expiry (a fetch in flight)
    lease     zset   id by expiry;  held: id by expiry (fetched, record not yet durable);  due: id by refetch time
    own       hash   id -> owner of its lease or hold (backend.py: only the owner may change them)
    h:<host>  hash   next, delay, errors, blocked, admitted, owner (of the lease it is busy with)
    r:<host>  hash   robots.txt record
    bf:<stage>:<block> string  Bloom filter blocks (spider/frontier/bloom.py);  bm hash: admitted
    dg        hash   payload digest -> first capture;  stat hash: queued, expired_leases, robots_<status>

The crawl's scope (hosts links may be followed into) is the set `scope` of each host's partition.
Each script is atomic, so two workers can never lease one URL or one host at once.
"""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import redis
from redis.cluster import RedisCluster

from spider.frontier.backend import DigestSeen, FrontierBackend, HostState, Leased, NewUrl, RobotsRecord, new_owner
from spider.frontier.bloom import BloomLayout
from spider.frontier.canonical import jump_hash

LUA = Path(__file__).with_name("lua")
ROBOTS_STATUSES = ("parsed", "allow_all", "disallow_all")


def connect(url: str) -> redis.Redis | RedisCluster:
    """redis://HOST:PORT/DB for one server, redis+cluster://HOST:PORT for Redis Cluster (any node)."""
    if url.startswith("redis+cluster://"):
        return RedisCluster.from_url("redis://" + url[len("redis+cluster://"):].split("/")[0])
    return redis.Redis.from_url(url)


class RedisFrontier(FrontierBackend):
    def __init__(self, url: str, namespace: str, partitions: int, bloom: BloomLayout):
        self.url, self.namespace, self.partitions, self.bloom = url, namespace, partitions, bloom
        self.client = connect(url)
        self.owner = new_owner()
        common = (LUA / "common.lua").read_text()
        self.scripts = {name: self.client.register_script(common + (LUA / f"{name}.lua").read_text())
                        for name in ("add", "lease", "release", "settle", "robots_put", "repayload", "refund")}
        self._where: dict[str, int] = {}  # id -> partition, for the ids this worker has seen (else: every partition)

    # --- keys ----------------------------------------------------------------------------------------
    def partition(self, host: str) -> int:
        return jump_hash(int.from_bytes(hashlib.blake2b(host.encode(), digest_size=8).digest(), "big"),
                         self.partitions)

    def prefix(self, p: int) -> str:
        return f"{self.namespace}:{{{p}}}:"

    def _run(self, script: str, p: int, args: Iterable) -> object:
        prefix = self.prefix(p)
        return self.scripts[script](keys=[prefix + "seq"], args=[prefix, *args])

    def _run_many(self, script: str, calls: list[tuple[int, list]]) -> list:
        """One script per (partition, args), in one round trip on a single server; Redis Cluster's pipelines
        refuse scripts (redis-py), so there they run in turn."""
        if isinstance(self.client, RedisCluster):
            return [self._run(script, p, args) for p, args in calls]
        pipe = self.client.pipeline(transaction=False)
        for p, args in calls:
            prefix = self.prefix(p)
            self.scripts[script](keys=[prefix + "seq"], args=[prefix, *args], client=pipe)
        return pipe.execute()

    # --- admission -----------------------------------------------------------------------------------
    def add(self, urls: list[NewUrl], now: float, max_per_host: int) -> list[str]:
        by_partition: dict[int, list[int]] = defaultdict(list)
        for i, new in enumerate(urls):
            by_partition[self.partition(new.host)].append(i)
        out: list[str] = [""] * len(urls)
        layout = self.bloom.lua_args()
        # the partition scope of the layout key: a partition count changed under a running crawl is refused too
        layout_key = f"{self.bloom.key} partitions={self.partitions}"
        calls = []
        for p, indexes in by_partition.items():
            args: list = [repr(now), max_per_host, layout_key, len(layout) // 4, *layout]
            for i in indexes:
                new = urls[i]
                args += [new.id, new.host, new.priority, new.payload, *new.bloom, int(new.in_scope)]
                self._where[new.id] = p
            calls.append((p, args))
        for indexes, outcomes in zip(by_partition.values(), self._run_many("add", calls)):
            for i, outcome in zip(indexes, outcomes):
                out[i] = outcome.decode()
        return out

    # --- handing out work ----------------------------------------------------------------------------
    def lease(self, max_urls: int, now: float, lease_s: float) -> list[Leased]:
        # One round trip looks at every partition, so hosts that waited longest come first cluster-wide; the
        # scripts then run only where there is a host to hand out or a lease, hold or recrawl to settle.
        pipe = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            k = self.prefix(p)
            pipe.zrangebyscore(k + "ready", "-inf", repr(now), start=0, num=max_urls, withscores=True)
            for zset in ("lease", "held", "due", "busy"):
                pipe.zrangebyscore(k + zset, "-inf", repr(now), start=0, num=1)
        peeks = pipe.execute()
        candidates, settle = [], set()
        for p in range(self.partitions):
            ready, *overdue = peeks[p * 5:(p + 1) * 5]
            candidates += [(score, p) for _, score in ready]
            if any(overdue):
                settle.add(p)
        quota: dict[int, int] = defaultdict(int)
        for _, p in sorted(candidates)[:max_urls]:
            quota[p] += 1
        out: list[Leased] = []
        spare = max_urls - sum(quota.values())  # hosts that settling makes ready may take what is left
        plain = sorted(set(quota) - settle)  # nothing to settle: exactly their quota, in one round trip
        results = []
        if plain:
            results = list(zip(plain, self._run_many("lease", [(p, [repr(now), quota[p], repr(lease_s), self.owner])
                                                              for p in plain])))
        for p in sorted(settle):  # expired leases, holds or due recrawls: in turn, sharing the spare
            rows = self._run("lease", p, [repr(now), quota.get(p, 0) + spare, repr(lease_s), self.owner])
            spare -= max(0, len(rows) - quota.get(p, 0))
            results.append((p, rows))
        for p, rows in results:
            for row in rows:
                id_, host, payload, expires, delay, errors, blocked, admitted = (v.decode() for v in row)
                self._where[id_] = p
                out.append(Leased(id_, host, payload, float(expires),
                                  HostState(float(delay), int(errors), float(blocked), int(admitted))))
        return out

    def release_host(self, host: str, next_at: float, state: HostState | None = None) -> bool:
        args = [host, repr(next_at), repr(next_at), self.owner]
        if state is not None:
            args += [repr(state.delay_s), state.errors, repr(state.blocked_until)]
        return bool(self._run("release", self.partition(host), args))

    def _settle(self, op: str, ids: list[str], now: float, t: str, anyone: bool = False) -> list[str]:
        """The ids the script changed."""
        by_partition: dict[int, list[str]] = defaultdict(list)
        for id_ in ids:
            where = self._where.get(id_)
            for p in ([where] if where is not None else range(self.partitions)):
                by_partition[p].append(id_)
        owner = "" if anyone else self.owner
        return [id_.decode() for p, part in by_partition.items() for chunk in _chunks(part, 500)
                for id_ in self._run("settle", p, [op, repr(now), t, owner, *chunk])]

    def requeue(self, ids: list[str], now: float, payloads: dict[str, str] | None = None) -> None:
        if payloads:  # this worker holds these (repayload.lua checks): nothing else writes their entries meanwhile
            by_partition: dict[int, list[str]] = defaultdict(list)
            for id_, payload in payloads.items():
                by_partition[self._where.get(id_, -1)] += [id_, payload]
            for p, args in by_partition.items():
                for part in ([p] if p >= 0 else range(self.partitions)):
                    self._run("repayload", part, [self.owner, *args])
        self._settle("requeue", ids, now, "")

    def fetched(self, ids: list[str], until: float) -> None:
        self._settle("fetched", ids, until, repr(until))

    def renew(self, ids: list[str], until: float) -> list[str]:
        return self._settle("renew", ids, until, repr(until))

    def ack(self, ids: list[str], refetch_at: float | None, now: float, anyone: bool = False) -> int:
        done = len(self._settle("ack", ids, now, "" if refetch_at is None else repr(refetch_at), anyone))
        for id_ in ids:
            self._where.pop(id_, None) if refetch_at is None else None
        return done

    def refund(self, hosts: list[str]) -> None:
        for host in hosts:
            self._run("refund", self.partition(host), [host])

    # --- scope -------------------------------------------------------------------------------------------
    def scope_add(self, hosts: list[str]) -> None:
        by_partition: dict[int, list[str]] = defaultdict(list)
        for host in hosts:
            by_partition[self.partition(host)].append(host)
        for p, part in by_partition.items():  # beside the host's queues: add.lua checks it in the same slot
            self.client.sadd(self.prefix(p) + "scope", *part)

    def scope(self) -> set[str]:
        pipe = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.smembers(self.prefix(p) + "scope")
        return {h.decode() for members in pipe.execute() for h in members}

    # --- politeness, robots.txt, digests -------------------------------------------------------------
    def host_state(self, host: str) -> HostState:
        delay, errors, blocked, admitted = self.client.hmget(self.prefix(self.partition(host)) + f"h:{host}",
                                                             "delay", "errors", "blocked", "admitted")
        return HostState(float(delay or -1), int(errors or 0), float(blocked or 0), int(admitted or 0))

    def robots_get(self, host: str) -> RobotsRecord | None:
        raw = self.client.hgetall(self.prefix(self.partition(host)) + f"r:{host}")
        if not raw:
            return None
        return RobotsRecord(raw[b"status"].decode(), raw[b"body"], float(raw[b"fetched"]), float(raw[b"expires"]),
                            raw[b"detail"].decode())

    def robots_put(self, host: str, record: RobotsRecord) -> None:
        self._run("robots_put", self.partition(host), [host, record.status, record.body, repr(record.fetched_at),
                                                      repr(record.expires), record.detail])

    def digest_first(self, digest: str, first: DigestSeen) -> DigestSeen | None:
        key = self.prefix(self.partition("digest:" + digest)) + "dg"
        value = json.dumps([first.url, first.date, first.record_id])
        if self.client.hsetnx(key, digest, value):
            return None
        return DigestSeen(*json.loads(self.client.hget(key, digest)))

    # --- observing -----------------------------------------------------------------------------------
    def pending(self, now: float) -> int:
        pipe = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.hget(self.prefix(p) + "stat", "queued")
            pipe.zcard(self.prefix(p) + "lease")
        return sum(int(v or 0) for v in pipe.execute())

    def counts(self, now: float) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            k = self.prefix(p)
            pipe.hgetall(k + "stat")
            pipe.zcard(k + "lease")
            pipe.zcard(k + "held")
            pipe.zcount(k + "ready", "-inf", repr(now))
            pipe.zcount(k + "ready", f"({now!r}", "+inf")
            pipe.zcard(k + "busy")
            pipe.zcard(k + "due")
            pipe.hget(k + "bm", "admitted")
        values = pipe.execute()
        total: dict[str, int] = defaultdict(int)
        for p in range(self.partitions):
            stat, *rest = values[p * 8:(p + 1) * 8]
            for name, value in zip(("leased", "held", "ready_hosts", "waiting_hosts", "busy_hosts", "due", "seen"),
                                   rest):
                total[name] += int(value or 0)
            for name in ("queued", "expired_leases", *(f"robots_{s}" for s in ROBOTS_STATUSES)):
                total[name] += int(stat.get(name.encode(), 0))
        return dict(total)

    def memory_bytes(self) -> int:
        """Redis's used_memory (one server; summed over a cluster's nodes)."""
        info = self.client.info("memory")
        if isinstance(self.client, RedisCluster):
            return sum(int(node_info["used_memory"]) for node_info in info.values())
        return int(info["used_memory"])

    def close(self) -> None:
        self.client.close()

    def clear(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.namespace}:{{*", count=1000))
        for key in keys:  # one by one: on a cluster, keys of different slots cannot share a DEL
            self.client.delete(key)
        self._where.clear()


def _chunks(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i:i + size]
