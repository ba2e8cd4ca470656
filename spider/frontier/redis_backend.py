"""The frontier over Redis (one server or Redis Cluster): any number of workers share one crawl.

Hosts are spread over `partitions` by jump consistent hash; every key of a partition carries the hash tag
`{<partition>}`, so each Lua script (spider/frontier/lua/) touches one slot and the same code runs on Redis
Cluster.  A partition holds, under `<namespace>:{p}:`:

    e         hash   id -> {h: host, s: score, p: payload}   every queued, leased, held or due URL
    q:<host>  zset   id by score (minus priority x 1e10, plus an insertion sequence: FIFO among equals)
    ready     zset   host by next-allowed time (hosts with URLs queued and no fetch in flight)
    busy      zset   host by its lease's expiry (a fetch in flight)
    lease     zset   id by expiry;  held: id by expiry (fetched, record not yet durable);  due: id by refetch time
              (these five sorted sets keep times as whole milliseconds: common.lua says why)
    own       hash   id -> owner of its lease or hold (backend.py: only the owner may change them)
    h:<host>  hash   next, delay, errors, blocked, admitted, owner (of the lease it is busy with), leases (count)
    r:<host>  hash   robots.txt record (and the host's tdmrep.json asked with it, frontier.tdmrep: respect)
    bf:<stage>:<block> string  Bloom filter blocks (spider/frontier/bloom.py);  bm hash: admitted
    dg        hash   payload digest -> first capture;  stat hash: queued, expired_leases, robots_<status>

The crawl's scope (hosts links may be followed into) is the set `scope` of each host's partition.
Each script is atomic, so two workers can never lease one URL or one host at once.
A worker's calls travel as pipelines of EVALSHA commands, one round trip per call (per node on a cluster) whatever
the number of partitions or operations in it: a scheduler tick is the URLs it adds, its operations (`apply`), a
peek at every partition (peek.lua) and the lease scripts where there is work, each in one round trip.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import redis
from redis.cluster import RedisCluster

from redis.exceptions import NoScriptError

from spider.frontier.backend import (DigestSeen, FrontierBackend, HostState, Leased, NewUrl, RobotsRecord, Unapplied,
                                     UrlPlace, new_owner)
from spider.frontier.bloom import BloomLayout
from spider.frontier.canonical import jump_hash

logger = logging.getLogger(__name__)
LUA = Path(__file__).with_name("lua")
ROBOTS_STATUSES = ("parsed", "allow_all", "disallow_all")
Command = tuple  # (script name, key, its arguments) or (None, "", a plain command's words)


def connect(url: str) -> redis.Redis | RedisCluster:
    """redis://HOST:PORT/DB for one server, redis+cluster://HOST:PORT for Redis Cluster (any node)."""
    if url.startswith("redis+cluster://"):
        return RedisCluster.from_url("redis://" + url[len("redis+cluster://"):].split("/")[0])
    return redis.Redis.from_url(url)


def unreachable(url: str) -> str | None:
    """Why the Redis (or Redis Cluster) at `url` does not answer a PING, or None when it does: a worker checks
    before Scrapy starts, so that a Redis that is down is one line, not a reactor's traceback."""
    try:
        client = connect(url)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class RedisFrontier(FrontierBackend):
    def __init__(self, url: str, namespace: str, partitions: int, bloom: BloomLayout):
        self.url, self.namespace, self.partitions, self.bloom = url, namespace, partitions, bloom
        self.client = connect(url)
        self.owner = new_owner()
        common = (LUA / "common.lua").read_text()
        self.scripts = {name: self.client.register_script(common + (LUA / f"{name}.lua").read_text())
                        for name in ("add", "lease", "release", "settle", "robots_put", "repayload", "peek",
                                     "counts", "to_ms")}
        self._where: dict[str, int] = {}  # id -> partition, for the ids this worker has seen (else: every partition)
        self._load_scripts()
        rescaled = sum(self._call([self._script("to_ms", p, []) for p in range(self.partitions)]))
        if rescaled:
            logger.warning("frontier %s: %d times kept in seconds (written before times were milliseconds) rescaled",
                        namespace, rescaled)
        suffix = f" partitions={partitions}"
        stored = next((v.decode() for v in self._call([(None, "", ("HGET", self.prefix(p) + "bm", "layout"))
                                                       for p in range(partitions)]) if v), None)
        self.configured, self.bloom = bloom, bloom.kept(stored, suffix)  # clear() starts over with the configured one
        if self.bloom is not bloom:
            logger.warning("frontier %s keeps the Bloom layout it was built with (%s)", namespace, stored)
        # the operations `apply` sends together: each one's commands
        self._builders = {"release_host": self._release, "requeue": self._requeue, "fetched": self._fetched,
                          "ack": self._ack, "deny": self._deny, "robots_put": self._robots_put,
                          "scope_add": self._scope_add}

    # --- keys ----------------------------------------------------------------------------------------
    def partition(self, host: str) -> int:
        return jump_hash(int.from_bytes(hashlib.blake2b(host.encode(), digest_size=8).digest(), "big"),
                         self.partitions)

    def prefix(self, p: int) -> str:
        return f"{self.namespace}:{{{p}}}:"

    # --- commands: several in one round trip ------------------------------------------------------------
    def _script(self, name: str, p: int, args: Iterable) -> Command:
        prefix = self.prefix(p)
        return name, prefix + "seq", (prefix, *args)

    def _send(self, commands: list[Command]) -> list:
        """The answers to `commands`, in order, an exception in place of each one that failed.  On one server they
        go in one round trip (on Redis Cluster, one per node), scripts as EVALSHA commands: redis-py's own script
        calls in a pipeline ask SCRIPT EXISTS first, a second round trip every time, and its cluster pipelines
        refuse them.  A server that lost the scripts (restarted, SCRIPT FLUSH) refuses each of them unrun: all
        are loaded again and the refused commands run again, in their order."""
        pipe = self.client.pipeline(transaction=False)
        for name, key, argv in commands:
            if name is None:
                pipe.execute_command(*argv)
            else:
                pipe.execute_command("EVALSHA", self.scripts[name].sha, 1, key, *argv)
        answers = pipe.execute(raise_on_error=False)
        refused = [i for i, answer in enumerate(answers) if isinstance(answer, NoScriptError)]
        if refused:
            self._load_scripts()
            for i, answer in zip(refused, self._send([commands[i] for i in refused])):
                answers[i] = answer
        return answers

    def _call(self, commands: list[Command]) -> list:
        """`_send`, raising the first failure."""
        return self._read_answers(self._send(commands))

    def _load_scripts(self) -> None:
        """Every script, so that no pipeline finds some loaded and others not (the loaded ones would run before
        the refused ones run again)."""
        for script in self.scripts.values():
            self.client.script_load(script.script)

    def apply(self, ops: list[tuple[str, tuple]]) -> None:
        """The operations' scripts in one round trip, in order: a `step` with nothing to add or lease."""
        if any(name not in self._builders for name, _ in ops):  # no command form: the default, one call each
            return super().apply(ops)
        self.step([], ops, 0, 0.0, 0.0, 0)

    # --- admission -----------------------------------------------------------------------------------
    def add(self, urls: list[NewUrl], now: float, max_per_host: int) -> list[str]:
        commands, read = self._add(urls, now, max_per_host)
        return read(self._call(commands))

    def _add(self, urls: list[NewUrl], now: float, max_per_host: int):
        """add.lua's commands, one per partition, and the function that reads their answers as `add`'s."""
        by_partition: dict[int, list[int]] = defaultdict(list)
        for i, new in enumerate(urls):
            by_partition[self.partition(new.host)].append(i)
        layout = self.bloom.lua_args()
        # the partition scope of the layout key: a partition count changed under a running crawl is refused too
        layout_key = f"{self.bloom.key} partitions={self.partitions}"
        commands = []
        for p, indexes in by_partition.items():
            args: list = [repr(now), max_per_host, layout_key, len(layout) // 5, *layout]
            for i in indexes:
                new = urls[i]
                args += [new.id, new.host, new.priority, new.payload, *new.bloom, int(new.in_scope)]
                self._where[new.id] = p
            commands.append(self._script("add", p, args))

        def read(answers: list) -> list[str]:
            out: list[str] = [""] * len(urls)
            for indexes, outcomes in zip(by_partition.values(), answers):
                for i, outcome in zip(indexes, outcomes):
                    out[i] = outcome.decode()
            return out
        return commands, read

    def step(self, adds: list[NewUrl], ops: list[tuple[str, tuple]], max_urls: int, now: float, lease_s: float,
             max_per_host: int) -> tuple[list[str], list[Leased]]:
        """The URLs, the operations and the peek at every partition in one round trip, then the lease scripts in
        a second: a scheduler tick's work in two round trips where separate calls took four.  A failed command
        fails its operation: the ones before it are applied.  A pipeline runs every command it holds, so the
        operations run even where the URLs failed: `done` counts them all the same.  If the round trip itself
        fails, none counts as applied; each operation is safe to apply twice (an owner or state check stops the
        second)."""
        if any(name not in self._builders for name, _ in ops):  # no command form: the default, one call each
            return super().step(adds, ops, max_urls, now, lease_s, max_per_host)
        commands, read = self._add(adds, now, max_per_host) if adds else ([], None)
        added = len(commands)
        ends = []
        for built, (name, args) in enumerate(ops):
            try:
                commands += self._builders[name](*args)
            except Exception as exc:  # arguments it cannot take: what comes before it is applied, then it fails
                outcomes = self.add(adds, now, max_per_host) if adds else []
                self.apply(ops[:built])
                raise Unapplied(built, outcomes=outcomes) from exc
            ends.append(len(commands))
        peeks = self._peeks(max_urls, now) if max_urls else []
        try:
            answers = self._send(commands + peeks)
        except Exception as exc:
            raise Unapplied(0) from exc
        add_failed = next((answer for answer in answers[:added] if isinstance(answer, Exception)), None)
        failed = next((i for i in range(added, len(commands)) if isinstance(answers[i], Exception)), None)
        done = len(ops) if failed is None else sum(1 for end in ends if end <= failed)
        for name, args in ops[:done]:
            if name in ("ack", "deny"):
                self._acked(*args)
        if add_failed is not None:  # the URLs go again (a URL admitted already says "seen"), the operations not
            raise Unapplied(done) from add_failed
        outcomes = read(answers[:added]) if read else []
        if failed is not None:
            raise Unapplied(done, outcomes=outcomes) from answers[failed]
        return outcomes, self._lease(self._read_answers(answers[len(commands):]), max_urls, now, lease_s) \
            if max_urls else []

    # --- handing out work ----------------------------------------------------------------------------
    def lease(self, max_urls: int, now: float, lease_s: float) -> list[Leased]:
        return self._lease(self._call(self._peeks(max_urls, now)), max_urls, now, lease_s)

    def _peeks(self, max_urls: int, now: float, partitions: Iterable[int] | None = None,
               depth: int | None = None) -> list[Command]:
        """peek.lua at each partition, for `depth` ready hosts; by default about twice a partition's share of
        `max_urls`, not all of them: each score costs Redis ~1 us to format (16 partitions x 32 were half of
        lease()'s Lua), and `_lease` asks again, for all, where a partition's every one was picked."""
        depth = depth or self._peek_depth(max_urls)
        return [self._script("peek", p, [repr(now), depth])
                for p in (range(self.partitions) if partitions is None else partitions)]

    def _peek_depth(self, max_urls: int) -> int:
        return min(max_urls, 2 + 2 * -(-max_urls // self.partitions))

    @staticmethod
    def _read_answers(answers: list) -> list:
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        return answers

    def _lease(self, peeks: list, max_urls: int, now: float, lease_s: float) -> list[Leased]:
        # The peek at every partition (one round trip) puts the hosts that waited longest first cluster-wide; the
        # scripts then run only where there is a host to hand out or a lease, hold or recrawl to settle.
        def picks() -> dict[int, int]:  # partition -> how many of the hosts that waited longest it holds
            candidates = [(float(score), p) for p, (_, ready) in enumerate(peeks) for score in ready]
            quota: dict[int, int] = defaultdict(int)
            for _, p in sorted(candidates)[:max_urls]:
                quota[p] += 1
            return quota

        depth, quota = self._peek_depth(max_urls), picks()
        # a partition whose every peeked host was picked may hold more that waited longer than others' picks
        again = [p for p, (_, ready) in enumerate(peeks) if len(ready) == depth < max_urls and quota.get(p) == depth]
        if again:
            peeks = list(peeks)
            for p, answer in zip(again, self._call(self._peeks(max_urls, now, again, depth=max_urls))):
                peeks[p] = answer
            quota = picks()
        settle = {p for p, (overdue, _) in enumerate(peeks) if overdue}
        out: list[Leased] = []
        spare = max_urls - sum(quota.values())  # hosts that settling makes ready may take what is left
        plain = sorted(set(quota) - settle)  # nothing to settle: exactly their quota, in one round trip
        results = []
        if plain:
            results = list(zip(plain, self._call([self._script("lease", p, [repr(now), quota[p], repr(lease_s),
                                                                            self.owner, 0]) for p in plain])))
        for p in sorted(settle):  # expired leases, holds or due recrawls: in turn, sharing the spare
            rows, = self._call([self._script("lease", p, [repr(now), quota.get(p, 0) + spare, repr(lease_s),
                                                          self.owner, 1])])
            spare -= max(0, len(rows) - quota.get(p, 0))
            results.append((p, rows))
        for p, rows in results:
            for row in rows:
                id_, host, payload, expires, delay, errors, blocked, admitted, numbered = (v.decode() for v in row)
                self._where[id_] = p
                out.append(Leased(id_, host, payload, float(expires),
                                  HostState(float(delay), int(errors), float(blocked), int(admitted)), int(numbered)))
        return out

    def release_host(self, host: str, next_at: float, state: HostState | None = None,
                     host_lease: int | None = None) -> bool:
        return bool(self._call(self._release(host, next_at, state, host_lease))[0])

    def _release(self, host: str, next_at: float, state: HostState | None = None,
                 host_lease: int | None = None) -> list[Command]:
        args = [host, repr(next_at), repr(next_at), self.owner, "" if host_lease is None else host_lease]
        if state is not None:
            args += [repr(state.delay_s), state.errors, repr(state.blocked_until)]
        return [self._script("release", self.partition(host), args)]

    def _settle(self, op: str, ids: list[str], now: float, t: str, anyone: bool = False) -> list[Command]:
        """settle.lua's commands; each answers the ids it changed."""
        by_partition: dict[int, list[str]] = defaultdict(list)
        for id_ in ids:
            where = self._where.get(id_)
            for p in ([where] if where is not None else range(self.partitions)):
                by_partition[p].append(id_)
        owner = "" if anyone else self.owner
        return [self._script("settle", p, [op, repr(now), t, owner, *chunk])
                for p, part in by_partition.items() for chunk in _chunks(part, 500)]

    def _requeue(self, ids: list[str], now: float, payloads: dict[str, str] | None = None) -> list[Command]:
        commands = []
        if payloads:  # this worker holds these (repayload.lua checks): nothing else writes their entries meanwhile
            by_partition: dict[int, list[str]] = defaultdict(list)
            for id_, payload in payloads.items():
                by_partition[self._where.get(id_, -1)] += [id_, payload]
            for p, args in by_partition.items():
                commands += [self._script("repayload", part, [self.owner, *args])
                             for part in ([p] if p >= 0 else range(self.partitions))]
        return commands + self._settle("requeue", ids, now, "")

    def _fetched(self, ids: list[str], until: float) -> list[Command]:
        return self._settle("fetched", ids, until, repr(until))

    def _ack(self, ids: list[str], refetch_at: float | None, now: float, anyone: bool = False) -> list[Command]:
        return self._settle("ack", ids, now, "" if refetch_at is None else repr(refetch_at), anyone)

    def _acked(self, ids: list[str], refetch_at: float | None, now: float, anyone: bool = False) -> None:
        if refetch_at is None:
            for id_ in ids:
                self._where.pop(id_, None)

    def _deny(self, ids: list[str], refetch_at: float | None, now: float) -> list[Command]:
        return self._settle("deny", ids, now, "" if refetch_at is None else repr(refetch_at))

    def requeue(self, ids: list[str], now: float, payloads: dict[str, str] | None = None) -> None:
        self._call(self._requeue(ids, now, payloads))

    def fetched(self, ids: list[str], until: float) -> None:
        self._call(self._fetched(ids, until))

    def renew(self, ids: list[str], until: float) -> list[str]:
        return [id_.decode() for changed in self._call(self._settle("renew", ids, until, repr(until)))
                for id_ in changed]

    def ack(self, ids: list[str], refetch_at: float | None, now: float, anyone: bool = False) -> int:
        done = sum(len(changed) for changed in self._call(self._ack(ids, refetch_at, now, anyone)))
        self._acked(ids, refetch_at, now, anyone)
        return done

    def deny(self, ids: list[str], refetch_at: float | None, now: float) -> int:
        done = sum(len(changed) for changed in self._call(self._deny(ids, refetch_at, now)))
        self._acked(ids, refetch_at, now)
        return done

    # --- scope -------------------------------------------------------------------------------------------
    def scope_add(self, hosts: list[str]) -> None:
        self._call(self._scope_add(hosts))

    def _scope_add(self, hosts: list[str]) -> list[Command]:
        by_partition: dict[int, list[str]] = defaultdict(list)
        for host in hosts:
            by_partition[self.partition(host)].append(host)
        # beside the host's queues: add.lua checks it in the same slot
        return [(None, "", ("SADD", self.prefix(p) + "scope", *part)) for p, part in by_partition.items()]

    def scope(self) -> set[str]:
        pipe = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.smembers(self.prefix(p) + "scope")
        return {h.decode() for members in pipe.execute() for h in members}

    def where(self, url: NewUrl) -> UrlPlace:
        """Three round trips at most: the partition's admitted count (which Bloom stages hold bits); the URL's entry
        and timers, its host's queue, scope and timers, and its Bloom bits in every stage written (GETBIT each: a
        lookup, not the hot path that add.lua's line reads serve); and, when it is queued, the URLs before it."""
        P, host = self.prefix(self.partition(url.host)), url.host
        admitted = int(self.client.hget(P + "bm", "admitted") or 0)
        stages = [(s, *self.bloom.stages[s].positions(url.bloom)) for s in range(self.bloom.stages_written(admitted))]
        pipe = self.client.pipeline(transaction=False)
        pipe.hexists(P + "e", url.id)
        for timers in ("lease", "held", "due"):
            pipe.zscore(P + timers, url.id)
        pipe.hget(P + "own", url.id)
        pipe.zscore(P + f"q:{host}", url.id)
        pipe.sismember(P + "scope", host)
        pipe.zscore(P + "ready", host)
        pipe.zscore(P + "busy", host)
        for s, block, bits in stages:
            for bit in bits:
                pipe.getbit(P + f"bf:{s}:{block}", bit)
        entry, lease, held, due, owner, score, in_scope, ready, busy, *bits = pipe.execute()
        ahead = None
        if score is not None:  # the lease order: the queue's score (priority, then admission)
            ahead = self.client.zcount(P + f"q:{host}", "-inf", f"({score}")
        state, until = next(((name, at / 1000) for name, at in (("leased", lease), ("held", held), ("due", due))
                             if at is not None), ("queued" if score is not None else None, None))
        at, seen = 0, False
        for _, _, positions in stages:
            seen = seen or all(bits[at:at + len(positions)])
            at += len(positions)
        holder = owner.decode() if owner and state in ("leased", "held") else None
        return UrlPlace(state if entry else None, until, holder, ahead, seen, bool(in_scope),
                        host_next=ready / 1000 if ready is not None else None, host_busy=busy is not None)

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
                            raw[b"detail"].decode(), raw.get(b"tdm"))

    def robots_put(self, host: str, record: RobotsRecord) -> None:
        self._call(self._robots_put(host, record))

    def _robots_put(self, host: str, record: RobotsRecord) -> list[Command]:
        return [self._script("robots_put", self.partition(host), [host, record.status, record.body,
                                                                  repr(record.fetched_at), repr(record.expires),
                                                                  record.detail,
                                                                  *([] if record.tdm is None else [record.tdm])])]

    def digest_firsts(self, items: list[tuple[str, DigestSeen]]) -> list[DigestSeen | None]:
        pipe = self.client.pipeline(transaction=False)  # each HSETNX, then the HGET of what it left: one round trip
        for digest, first in items:
            key = self.prefix(self.partition("digest:" + digest)) + "dg"
            pipe.hsetnx(key, digest, json.dumps([first.url, first.date, first.record_id]))
            pipe.hget(key, digest)
        answers = pipe.execute()
        return [None if new else DigestSeen(*json.loads(stored)) for new, stored in zip(answers[::2], answers[1::2])]

    # --- observing -----------------------------------------------------------------------------------
    def pending(self, now: float) -> int:
        pipe = self.client.pipeline(transaction=False)
        for p in range(self.partitions):
            pipe.hget(self.prefix(p) + "stat", "queued")
            pipe.zcard(self.prefix(p) + "lease")
        return sum(int(v or 0) for v in pipe.execute())

    def counts(self, now: float) -> dict[str, int]:
        names = ("queued", "expired_leases", *(f"robots_{s}" for s in ROBOTS_STATUSES), "leased", "held",
                 "ready_hosts", "waiting_hosts", "busy_hosts", "due", "seen")  # counts.lua's order
        total = dict.fromkeys(names, 0)
        for values in self._call([self._script("counts", p, [repr(now)]) for p in range(self.partitions)]):
            for name, value in zip(names, values):
                total[name] += int(value)
        return total

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
        self.bloom = self.configured


def _chunks(items: list, size: int):
    for i in range(0, len(items), size):
        yield items[i:i + size]
