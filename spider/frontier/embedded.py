"""The embedded frontier: one SQLite file (WAL), for a crawl on one machine with no server to run.

Every multi-step change is one `BEGIN IMMEDIATE` transaction, so the worker processes of one machine (and the
threads of one process) can share the file; a killed crawl finds everything it had committed when it starts
again.  Nothing is cached between transactions: another process may have written in between.

A host row is `idle` (nothing queued; `at` = its next-allowed time, or NULL), `queued` (`at` = when it may be
asked: *waiting* before that, *ready* after) or `busy` (`at` = when its lease expires).  A URL row is `queued`,
`leased` or `held` (`until` = expiry) or `due` (`until` = recrawl time); a URL forgotten by ack() is deleted.
A leased or held URL and a busy host carry their lease's `owner`; NULL (a file written before owners) matches any.
The Bloom filter is stored a block per row, created when a bit is first set, so a small crawl stays small.
"""
from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

from spider.frontier.backend import (DigestSeen, FrontierBackend, HostState, Leased, NewUrl, RobotsRecord, UrlPlace,
                                     new_owner)
from spider.frontier.bloom import BloomLayout

logger = logging.getLogger(__name__)
BUSY_TIMEOUT_S = 30.0  # a writer waits this long for another process's transaction before failing

_SCHEMA = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
INSERT OR IGNORE INTO meta VALUES ('admitted', 0), ('expired_leases', 0);
CREATE TABLE IF NOT EXISTS bloom (block INTEGER PRIMARY KEY, bits BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    host TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    at REAL,
    delay_s REAL NOT NULL DEFAULT -1.0,
    errors INTEGER NOT NULL DEFAULT 0,
    blocked_until REAL NOT NULL DEFAULT 0.0,
    admitted INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    leases INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS hosts_by_time ON hosts (state, at);
CREATE TABLE IF NOT EXISTS urls (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    host TEXT NOT NULL,
    priority INTEGER NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    until REAL,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS urls_queue ON urls (host, priority DESC, seq) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS urls_timers ON urls (until) WHERE until IS NOT NULL;
-- per-state URL counts kept by triggers, so pending() and counts() never scan the URLs
CREATE TABLE IF NOT EXISTS url_counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO url_counts VALUES ('queued', 0), ('leased', 0), ('held', 0), ('due', 0);
CREATE TRIGGER IF NOT EXISTS urls_counted_in AFTER INSERT ON urls BEGIN
    UPDATE url_counts SET n = n + 1 WHERE state = new.state;
END;
CREATE TRIGGER IF NOT EXISTS urls_counted_out AFTER DELETE ON urls BEGIN
    UPDATE url_counts SET n = n - 1 WHERE state = old.state;
END;
CREATE TRIGGER IF NOT EXISTS urls_counted_moved AFTER UPDATE OF state ON urls WHEN old.state != new.state BEGIN
    UPDATE url_counts SET n = n - 1 WHERE state = old.state;
    UPDATE url_counts SET n = n + 1 WHERE state = new.state;
END;
CREATE TABLE IF NOT EXISTS robots (
    host TEXT PRIMARY KEY, status TEXT NOT NULL, body BLOB NOT NULL, fetched_at REAL NOT NULL,
    expires REAL NOT NULL, detail TEXT NOT NULL, tdm BLOB
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS robots_by_status ON robots (status);
CREATE TABLE IF NOT EXISTS digests (
    digest TEXT PRIMARY KEY, url TEXT NOT NULL, date TEXT NOT NULL, record_id TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scope (host TEXT PRIMARY KEY) WITHOUT ROWID;
COMMIT;
"""

# a lease, hold or busy host this owner may change: its own, or one taken before leases had owners
_MINE = "(owner IS NULL OR owner = :owner)"

_HAS_QUEUED = "EXISTS (SELECT 1 FROM urls WHERE urls.host = hosts.host AND urls.state = 'queued')"

# an idle host that gets a URL may be asked at its next-allowed time, or at `t` if that came first (or it has none)
_IDLE_TO_QUEUED = ("UPDATE hosts SET state = 'queued', at = max(coalesce(at, :t), :t) "
                   "WHERE host = :host AND state = 'idle'")

_ADMIT_HOST = """
INSERT INTO hosts (host, state, at, admitted) VALUES (:host, 'queued', :t, :admitted)
ON CONFLICT (host) DO UPDATE SET
    admitted = excluded.admitted,
    at = CASE WHEN state = 'idle' THEN max(coalesce(at, excluded.at), excluded.at) ELSE at END,
    state = CASE WHEN state = 'idle' THEN 'queued' ELSE state END
"""


class _Blocks:
    """The Bloom blocks one transaction touches, as open blob handles: bits are read and set in place, so a
    64 KiB block is never copied or rewritten whole.  Bit p of a block is byte p // 8, mask 0x80 >> p % 8
    (Redis GETBIT/SETBIT order: both backends' blocks are byte-identical).  A missing row reads as zeros."""

    def __init__(self, db: sqlite3.Connection, bloom: BloomLayout):
        self.db, self.bloom = db, bloom
        self.handles: dict[int, sqlite3.Blob | None] = {}

    def _handle(self, stage: int, block: int, create: bool) -> sqlite3.Blob | None:
        rowid = stage << 32 | block
        if rowid not in self.handles:
            exists = self.db.execute("SELECT 1 FROM bloom WHERE block = ?", (rowid,)).fetchone()
            self.handles[rowid] = self.db.blobopen("bloom", "bits", rowid) if exists else None
        if self.handles[rowid] is None and create:
            self.db.execute("INSERT INTO bloom VALUES (?, zeroblob(?))", (rowid, self.bloom.block_bytes))
            self.handles[rowid] = self.db.blobopen("bloom", "bits", rowid)
        return self.handles[rowid]

    def has(self, hashes: tuple[int, int, int, int], stages: int) -> bool:
        """Whether any of the first `stages` stages has all of the URL's bits."""
        for stage in range(stages):
            block, bits = self.bloom.stages[stage].positions(hashes)
            blob = self._handle(stage, block, create=False)
            if blob is not None and all(blob[p >> 3] & (0x80 >> (p & 7)) for p in bits):
                return True
        return False

    def set(self, hashes: tuple[int, int, int, int], stage: int) -> None:
        block, bits = self.bloom.stages[stage].positions(hashes)
        blob = self._handle(stage, block, create=True)
        for p in bits:
            blob[p >> 3] |= 0x80 >> (p & 7)

    def close(self) -> None:
        for blob in self.handles.values():
            if blob is not None:
                blob.close()  # before COMMIT: an open blob handle is an unfinished statement
        self.handles.clear()


class SqliteFrontier(FrontierBackend):
    """The frontier in one SQLite file; any number of instances, threads and processes of one machine may share
    it.  One instance may be called from two threads (the scheduler's and the WARC writer's): a lock serializes
    them over its one connection."""

    def __init__(self, path: str, bloom: BloomLayout):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path, self.bloom = path, bloom
        self._lock = threading.RLock()
        self._batching = False
        # isolation_level=None: the transactions are ours (BEGIN IMMEDIATE), not the sqlite3 module's implicit ones
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a killed process loses no commit
        self._db.execute("PRAGMA cache_size = -65536")  # 64 MiB: the Bloom blocks in use stay in memory
        # 64 MiB of WAL between checkpoints, not 4: a Bloom page dirtied by many commits is copied back once
        self._db.execute("PRAGMA wal_autocheckpoint = 16384")
        self._db.executescript(_SCHEMA)
        self._add_owner_columns()
        self.owner = new_owner()
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('bloom_layout', ?)", (bloom.key,))
            stored = self._meta(db, "bloom_layout")
        self.configured, self.bloom = bloom, bloom.kept(stored)  # clear() starts over with the configured one
        if self.bloom is not bloom:
            logger.warning("frontier %s keeps the Bloom layout it was built with (%s)", path, stored)

    atomic_batches = True

    def _add_owner_columns(self) -> None:
        """A frontier file written before leases had owners gets the columns (NULL: anyone's), and before a host's
        leases were numbered, the count (0: a release that names a lease finds a later one and keeps the record), and
        before a host's TDMRep file rode with its robots.txt, that column (NULL: not asked)."""
        with self._transaction() as db:
            for table in ("urls", "hosts"):
                if "owner" not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN owner TEXT")
            if "leases" not in {row[1] for row in db.execute("PRAGMA table_info(hosts)")}:
                db.execute("ALTER TABLE hosts ADD COLUMN leases INTEGER NOT NULL DEFAULT 0")
            if "tdm" not in {row[1] for row in db.execute("PRAGMA table_info(robots)")}:
                db.execute("ALTER TABLE robots ADD COLUMN tdm BLOB")

    @contextmanager
    def batch(self):
        """One transaction for everything called inside (the calls' own transactions join it)."""
        with self._transaction() as db:
            self._batching = True
            try:
                yield db
            finally:
                self._batching = False

    @contextmanager
    def _transaction(self, write: bool = True):
        """All or nothing for other threads and processes: BEGIN IMMEDIATE takes the write lock up front, so two
        writers never deadlock upgrading a read; a read-only snapshot takes a plain BEGIN."""
        with self._lock:
            if self._batching:  # inside batch(), on the thread holding the lock: part of its transaction
                yield self._db
                return
            self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    @staticmethod
    def _meta(db: sqlite3.Connection, key: str):
        return db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0]

    # --- admission -------------------------------------------------------------------------------------
    def add(self, urls: list[NewUrl], now: float, max_per_host: int) -> list[str]:
        out: list[str] = []
        with self._transaction() as db:
            stored = self._meta(db, "bloom_layout")
            if stored != self.bloom.key:
                raise ValueError(f"the frontier at {self.path} was built with the Bloom layout {stored}, not "
                                 f"{self.bloom.key}: its URLs would look new again; restore "
                                 f"frontier.bloom_capacity/bloom_fp_rate or start over with --fresh-frontier")
            total = self._meta(db, "admitted")
            admitted_of: dict[str, int] = {}  # hosts of this batch -> URLs admitted so far
            rows = []
            blocks = _Blocks(db, self.bloom)
            try:
                for new in urls:
                    if not new.in_scope and db.execute("SELECT 1 FROM scope WHERE host = ?", (new.host,)).fetchone() \
                            is None:
                        out.append("offsite")  # not marked seen: the host may join the scope later
                        continue
                    stage = self.bloom.stage_for(total)
                    if blocks.has(new.bloom, stage + 1):
                        out.append("seen")
                        continue
                    if new.host not in admitted_of:
                        row = db.execute("SELECT admitted FROM hosts WHERE host = ?", (new.host,)).fetchone()
                        admitted_of[new.host] = row[0] if row else 0
                    if 0 < max_per_host <= admitted_of[new.host]:
                        out.append("host_budget")  # not marked seen: a budget raised later admits it
                        continue
                    blocks.set(new.bloom, stage)
                    total += 1
                    admitted_of[new.host] += 1
                    rows.append((new.id, new.host, new.priority, new.payload))
                    out.append("admitted")
            finally:
                blocks.close()
            db.executemany("INSERT INTO urls (id, host, priority, payload, state) VALUES (?, ?, ?, ?, 'queued')", rows)
            hosts = {host for _, host, _, _ in rows}
            db.executemany(_ADMIT_HOST, [{"host": h, "t": now, "admitted": admitted_of[h]} for h in hosts])
            db.execute("UPDATE meta SET value = ? WHERE key = 'admitted'", (total,))
        return out

    # --- handing out work ------------------------------------------------------------------------------
    def lease(self, max_urls: int, now: float, lease_s: float) -> list[Leased]:
        until = now + lease_s
        out: list[Leased] = []
        with self._transaction() as db:
            self._reap(db, now)
            while len(out) < max_urls:
                hosts = db.execute(
                    "SELECT host, delay_s, errors, blocked_until, admitted FROM hosts "
                    "WHERE state = 'queued' AND at <= ? ORDER BY at, host LIMIT ?",
                    (now, max_urls - len(out))).fetchall()
                if not hosts:
                    break
                for host, delay_s, errors, blocked_until, admitted in hosts:
                    row = db.execute("SELECT seq, id, payload FROM urls WHERE host = ? AND state = 'queued' "
                                     "ORDER BY priority DESC, seq LIMIT 1", (host,)).fetchone()
                    if row is None:  # a queued host always has a URL; should that ever break, heal it
                        db.execute("UPDATE hosts SET state = 'idle' WHERE host = ?", (host,))
                        continue
                    seq, id_, payload = row
                    db.execute("UPDATE urls SET state = 'leased', until = ?, owner = ? WHERE seq = ?",
                               (until, self.owner, seq))
                    numbered, = db.execute("UPDATE hosts SET state = 'busy', at = ?, owner = ?, leases = leases + 1 "
                                           "WHERE host = ? RETURNING leases", (until, self.owner, host)).fetchone()
                    out.append(Leased(id_, host, payload, until, HostState(delay_s, errors, blocked_until, admitted),
                                      numbered))
        return out

    def _reap(self, db: sqlite3.Connection, now: float) -> None:
        """Expired leases and holds, and recrawls due by `now`, back in their queues; expired busy hosts freed."""
        back = db.execute("SELECT host, min(until), sum(state != 'due') FROM urls WHERE until <= ? GROUP BY host",
                          (now,)).fetchall()
        if back:
            db.execute("UPDATE urls SET state = 'queued', until = NULL, owner = NULL WHERE until <= ?", (now,))
            db.executemany(_IDLE_TO_QUEUED, [{"host": host, "t": t} for host, t, _ in back])
            db.execute("UPDATE meta SET value = value + ? WHERE key = 'expired_leases'",
                       (sum(expired for _, _, expired in back),))
        # a busy host becomes ready at its lease's expiry, so it keeps its place among the ready ones
        db.execute(f"UPDATE hosts SET state = CASE WHEN {_HAS_QUEUED} THEN 'queued' ELSE 'idle' END, owner = NULL "
                   "WHERE state = 'busy' AND at <= ?", (now,))

    def release_host(self, host: str, next_at: float, state: HostState | None = None,
                     host_lease: int | None = None) -> bool:
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO hosts (host, state) VALUES (?, 'idle')", (host,))
            # A busy host's `at` is its lease's expiry.  A host nobody holds gets a late release (its worker's lease
            # expired; another worker may have fetched from it since): a later next-allowed time stays, and the
            # politeness record too when the host was leased since (or, not knowing the lease, with the later time).
            stored, at, owner, leases = db.execute("SELECT state, at, owner, leases FROM hosts WHERE host = ?",
                                                   (host,)).fetchone()
            later = stored != "busy" and at is not None and at > next_at
            if host_lease is None:  # the lease not named: a busy host is its owner's, the later time's record stays
                current, keep_record = owner in (None, self.owner), later
            else:  # no lease of the host since the one this release ends
                current = host_lease == leases
                keep_record = not current
            if stored == "busy" and not current:
                return False
            db.execute(f"UPDATE hosts SET at = :at, owner = NULL, "
                       f"state = CASE WHEN {_HAS_QUEUED} THEN 'queued' ELSE 'idle' END WHERE host = :host",
                       {"at": at if later else next_at, "host": host})
            if state is not None and not keep_record:  # `admitted` stays the stored count (others admit)
                db.execute("UPDATE hosts SET delay_s = ?, errors = ?, blocked_until = ? WHERE host = ?",
                           (state.delay_s, state.errors, state.blocked_until, host))
            return True

    def requeue(self, ids: list[str], now: float, payloads: dict[str, str] | None = None) -> None:
        with self._transaction() as db:
            if payloads:
                db.executemany(f"UPDATE urls SET payload = :payload WHERE id = :id AND state IN ('leased', 'held') "
                               f"AND {_MINE}", [{"payload": p, "id": i, "owner": self.owner}
                                                for i, p in payloads.items()])
            hosts = set()
            for id_ in ids:  # seq is kept: the URL goes ahead of those admitted after it
                hosts.update(host for host, in db.execute(
                    f"UPDATE urls SET state = 'queued', until = NULL, owner = NULL WHERE id = :id "
                    f"AND state IN ('leased', 'held') AND {_MINE} RETURNING host",
                    {"id": id_, "owner": self.owner}).fetchall())
            db.executemany(_IDLE_TO_QUEUED, [{"host": host, "t": now} for host in hosts])

    def fetched(self, ids: list[str], until: float) -> None:
        with self._transaction() as db:
            db.executemany(f"UPDATE urls SET state = 'held', until = :until WHERE id = :id AND state = 'leased' "
                           f"AND {_MINE}", [{"until": until, "id": id_, "owner": self.owner} for id_ in ids])

    def renew(self, ids: list[str], until: float) -> list[str]:
        renewed = []
        with self._transaction() as db:
            for id_ in ids:
                mine = {"until": until, "id": id_, "owner": self.owner}
                for host, state in db.execute(f"UPDATE urls SET until = :until WHERE id = :id "
                                              f"AND state IN ('leased', 'held') AND {_MINE} RETURNING host, state",
                                              mine).fetchall():
                    renewed.append(id_)
                    if state == "leased":  # the host stays busy as long as its lease
                        db.execute(f"UPDATE hosts SET at = max(at, :until) WHERE host = :host AND state = 'busy' "
                                   f"AND {_MINE}", {**mine, "host": host})
        return renewed

    def ack(self, ids: list[str], refetch_at: float | None, now: float, anyone: bool = False) -> int:
        return self._ack(ids, refetch_at, anyone, refund=False)

    def deny(self, ids: list[str], refetch_at: float | None, now: float) -> int:
        return self._ack(ids, refetch_at, anyone=False, refund=True)

    def _ack(self, ids: list[str], refetch_at: float | None, anyone: bool, refund: bool) -> int:
        whose = "" if anyone else f"AND {_MINE}"
        rows = [{"id": id_, "at": refetch_at, "owner": self.owner} for id_ in ids]
        with self._transaction() as db:
            if refund:  # before the ack, in its transaction: only a URL acknowledged now is refunded
                db.executemany(f"UPDATE hosts SET admitted = max(admitted - 1, 0) WHERE host = (SELECT host FROM urls "
                               f"WHERE id = :id AND state IN ('leased', 'held') {whose})", rows)
            if refetch_at is None:
                cur = db.executemany(f"DELETE FROM urls WHERE id = :id AND state IN ('leased', 'held') {whose}", rows)
            else:
                cur = db.executemany(f"UPDATE urls SET state = 'due', until = :at, owner = NULL WHERE id = :id "
                                     f"AND state IN ('leased', 'held') {whose}", rows)
            return cur.rowcount

    def where(self, url: NewUrl) -> UrlPlace:
        with self._transaction(write=False) as db:
            row = db.execute("SELECT state, until, owner, priority, seq FROM urls WHERE id = ?", (url.id,)).fetchone()
            ahead = None
            if row and row[0] == "queued":  # the lease order: priority, then admission
                ahead, = db.execute("SELECT count(*) FROM urls WHERE host = ? AND state = 'queued' AND "
                                    "(priority > ? OR (priority = ? AND seq < ?))",
                                    (url.host, row[3], row[3], row[4])).fetchone()
            blocks = _Blocks(db, self.bloom)
            try:
                seen = blocks.has(url.bloom, self.bloom.stages_written(self._meta(db, "admitted")))
            finally:
                blocks.close()
            in_scope = db.execute("SELECT 1 FROM scope WHERE host = ?", (url.host,)).fetchone() is not None
            host = db.execute("SELECT state, at FROM hosts WHERE host = ?", (url.host,)).fetchone()
        state, until, owner = row[:3] if row else (None, None, None)
        owner = owner if state in ("leased", "held") else None
        return UrlPlace(state, until, owner, ahead, seen, in_scope,
                        host_next=host[1] if host and host[0] == "queued" else None,
                        host_busy=bool(host and host[0] == "busy"))

    # --- politeness and robots.txt ---------------------------------------------------------------------
    def host_state(self, host: str) -> HostState:
        with self._lock:
            row = self._db.execute("SELECT delay_s, errors, blocked_until, admitted FROM hosts WHERE host = ?",
                                   (host,)).fetchone()
        return HostState(*row) if row else HostState()

    def robots_get(self, host: str) -> RobotsRecord | None:
        with self._lock:
            row = self._db.execute("SELECT status, body, fetched_at, expires, detail, tdm FROM robots WHERE host = ?",
                                   (host,)).fetchone()
        return RobotsRecord(*row) if row else None

    def robots_put(self, host: str, record: RobotsRecord) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO robots VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (host, record.status, record.body, record.fetched_at, record.expires, record.detail,
                              record.tdm))

    # --- scope -------------------------------------------------------------------------------------------
    def scope_add(self, hosts: list[str]) -> None:
        with self._transaction() as db:
            db.executemany("INSERT OR IGNORE INTO scope VALUES (?)", [(h,) for h in hosts])

    def scope(self) -> set[str]:
        with self._lock:
            return {h for h, in self._db.execute("SELECT host FROM scope")}

    # --- WARC revisit records --------------------------------------------------------------------------
    def digest_firsts(self, items: list[tuple[str, DigestSeen]]) -> list[DigestSeen | None]:
        out: list[DigestSeen | None] = []
        with self._transaction() as db:
            for digest, first in items:
                row = db.execute("SELECT url, date, record_id FROM digests WHERE digest = ?", (digest,)).fetchone()
                if not row:
                    db.execute("INSERT INTO digests VALUES (?, ?, ?, ?)",
                               (digest, first.url, first.date, first.record_id))
                out.append(DigestSeen(*row) if row else None)
        return out

    # --- observing -------------------------------------------------------------------------------------
    def pending(self, now: float) -> int:
        with self._transaction(write=False) as db:
            live = db.execute("SELECT sum(n) FROM url_counts WHERE state IN ('queued', 'leased')").fetchone()[0]
            # expired holds and due recrawls are queued again by the next lease(): they keep the crawl going too
            back = db.execute("SELECT count(*) FROM urls WHERE until <= ? AND state IN ('held', 'due')",
                              (now,)).fetchone()[0]
        return live + back

    def counts(self, now: float) -> dict[str, int]:
        with self._transaction(write=False) as db:
            out = dict(db.execute("SELECT state, n FROM url_counts").fetchall())
            hosts = db.execute("SELECT sum(state = 'queued' AND at <= ?), sum(state = 'queued' AND at > ?), "
                               "sum(state = 'busy') FROM hosts WHERE state IN ('queued', 'busy')",
                               (now, now)).fetchone()
            robots = dict(db.execute("SELECT status, count(*) FROM robots GROUP BY status").fetchall())
            seen, expired = self._meta(db, "admitted"), self._meta(db, "expired_leases")
        ready, waiting, busy = (n or 0 for n in hosts)
        return {"queued": out["queued"], "leased": out["leased"], "held": out["held"], "ready_hosts": ready,
                "waiting_hosts": waiting, "busy_hosts": busy, "due": out["due"], "seen": seen,
                "expired_leases": expired, "robots_parsed": robots.get("parsed", 0),
                "robots_allow_all": robots.get("allow_all", 0), "robots_disallow_all": robots.get("disallow_all", 0)}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def clear(self) -> None:
        with self._transaction() as db:
            for table in ("bloom", "hosts", "urls", "robots", "digests", "scope"):
                db.execute(f"DELETE FROM {table}")
            db.execute("UPDATE url_counts SET n = 0")
            db.execute("UPDATE meta SET value = 0 WHERE key IN ('admitted', 'expired_leases')")
            self.bloom = self.configured
            db.execute("UPDATE meta SET value = ? WHERE key = 'bloom_layout'", (self.bloom.key,))
