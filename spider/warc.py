"""WARC/1.1 output: the records of each fetch in size- and age-rotated, gzip-per-record files (SEAMS §2).

warcio builds the records and computes WARC-Block-Digest and WARC-Payload-Digest (sha1, base32).
This module adds what warcio leaves to its caller: file naming, the `.open` -> final rename
that lets readers see only complete files, the warcinfo record at the head of every file,
rotation by size and by age, metadata records, and revisit records: for payloads already stored, and for a
`304 Not Modified` answer to a conditional recrawl.  A URL the crawl ended without an answer (refused by robots.txt
or TDMRep, or failed for good) is a lone metadata record whose `notFetched` field says why (`NotFetched`).
It knows nothing of Scrapy or threads, so it can be tested and reused alone; spider/warc_thread.py
runs it on the crawl's one writer thread.

A file is handed on (`on_closed`) only once it is fsynced and renamed and the rename itself is fsynced:
from then on a machine crash cannot take it back, which is what "durable" means for a local warc_dir.

A fetch is written as one block of gzip members (response or revisit, then metadata, then request), built
in memory and appended with plain write(2) calls: a write that fails (disk full) is cut back off the file,
so the file still ends with a whole fetch, and the request record stays the last record of every fetch
(what spider/warc_salvage.py cuts a killed crawl's file back to); a lone metadata record is whole on its own.
"""
from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from io import BytesIO
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Protocol
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser
from warcio.timeutils import datetime_to_iso_date
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter

from spider.frontier.backend import DigestSeen
from spider.render.warc_record import RenderedDom, conversion_record
from storage import fsync_dir  # noqa: F401  (re-exported for the spider's modules)

logger = logging.getLogger(__name__)

OPEN_SUFFIX = ".open"
WARC_VERSION = "WARC/1.1"
WARC_SPEC = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
# WARC 1.1 §6.7.3; warcio's create_revisit_record writes only the identical-payload-digest profile
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
# Twisted has already removed the chunked framing from the body it hands over; a block that
# still said "Transfer-Encoding: chunked" would make readers de-chunk a plain body.  The header
# is kept under this name, as StormCrawler does (WARCRecordFormat.java).
RENAMED_HEADERS = {b"transfer-encoding": b"X-Crawler-Transfer-Encoding"}

HeaderList = Iterable[tuple[bytes, bytes]]
# Never store credentials in an archive that others will read.
UNRECORDED_REQUEST_HEADERS = {b"proxy-authorization", b"authorization"}
_TRANSFER_ENCODING_LINE = re.compile(rb"(?im)^(transfer-encoding)(?=[ \t]*:)")
_CREDENTIAL_LINES = re.compile(rb"(?im)^(?:proxy-authorization|authorization)[ \t]*:.*\r?\n(?:[ \t].*\r?\n)*")


class WireHead(StatusAndHeaders):
    """A head parsed for readers that writes (and is digested as) the bytes it came from.

    warcio writes and digests `headers_buff`; setting it to the wire bytes is its one hook for a
    head that was not built field by field.
    """

    def __init__(self, raw: bytes, is_http_request: bool):
        parsed = StatusAndHeadersParser([], verify=False).parse(BytesIO(raw))
        super().__init__(parsed.statusline, parsed.headers, protocol=parsed.protocol,
                         total_len=len(raw), is_http_request=is_http_request)
        self.raw = raw

    def compute_headers_buffer(self, header_filter=None):
        self.headers_buff = self.raw


def wire_response_head(raw: bytes) -> WireHead:
    """The response head as received; only a Transfer-Encoding field is renamed (see RENAMED_HEADERS)."""
    return WireHead(_TRANSFER_ENCODING_LINE.sub(rb"X-Crawler-\1", raw), is_http_request=False)


def wire_request_head(raw: bytes) -> WireHead:
    """The request head as sent, less its credential fields."""
    return WireHead(_CREDENTIAL_LINES.sub(b"", raw), is_http_request=True)


def response_head(protocol: str | None, status: int, headers: HeaderList) -> StatusAndHeaders:
    """The HTTP status line and headers of a response block, rebuilt from parsed headers.

    Only for a response whose wire bytes were not recorded (spider/wire.py), such as one from a
    download handler other than ours.  Scrapy/Twisted parse the headers, so the block is re-serialised:
    values and Scrapy's order are kept, but names come back in Twisted's canonical case, Twisted
    may move Content-Length, and the reason phrase (which Scrapy drops) is the standard one
    for the status code.  warcio %-encodes non-ASCII header values (RFC 8187).
    """
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    fields = [(RENAMED_HEADERS.get(name.lower(), name).decode("latin-1"), value.decode("latin-1"))
              for name, value in headers]
    return StatusAndHeaders(f"{status} {reason}", fields, protocol=protocol or "HTTP/1.1")


def request_head(method: str, url: str, headers: HeaderList) -> StatusAndHeaders:
    """The request line (origin-form target, as on the wire to an origin server) and headers."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    fields = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in headers]
    if not any(name.lower() == "host" for name, _ in fields):
        fields.insert(0, ("Host", parts.netloc))  # Twisted adds Host itself, after Scrapy's last look
    return StatusAndHeaders(f"{method} {target} HTTP/1.1", fields, protocol="", is_http_request=True)



def warc_date() -> str:
    """Now as a WARC 1.1 date (UTC, microseconds)."""
    return datetime_to_iso_date(datetime.now(timezone.utc).replace(tzinfo=None), use_micros=True)


def payload_digest(payload: bytes) -> str:
    """WARC-Payload-Digest as warcio writes it (its own Digester): `sha1:<base32>`."""
    digest = Digester("sha1")
    digest.update(payload)
    return str(digest)


@dataclass(frozen=True)
class Fetch:
    """One fetch as the crawl captured it: everything its records need, nothing of Scrapy."""
    url: str
    request: StatusAndHeaders
    request_body: bytes
    response: StatusAndHeaders
    response_body: bytes
    date: str = field(default_factory=warc_date)  # WARC-Date of all its records: when the response arrived
    ip_address: str | None = None                 # the address contacted (WARC 1.1 §5.12)
    truncated: str | None = None                  # WARC-Truncated reason (§5.13) when the body is not whole
    metadata: dict[str, str] | None = None        # fields of its metadata record; None: no metadata record
    rendered: RenderedDom | None = None           # the DOM a browser rendered from it: a conversion record
    record_id: str | None = None                  # its response record's WARC-Record-ID; None: made at write
    conditional: bool = False                     # sent with If-None-Match / If-Modified-Since (a recrawl)
    not_modified_of: DigestSeen | None = None     # the capture whose validators it sent, when known

    @property
    def status(self) -> int | None:
        try:
            return int(self.response.get_statuscode())
        except (TypeError, ValueError):
            return None

    @property
    def not_modified(self) -> bool:
        """The server's `304 Not Modified` to our conditional request: the page is the one captured before."""
        return self.conditional and self.status == 304

    def revisitable(self) -> bool:
        """Only a whole, non-empty 2xx payload may stand for another (Heritrix dedups 200s only): redirects
        and errors are kept in full, and a 206 is a part, not the resource."""
        status = self.status
        return bool(self.response_body) and not self.truncated and status is not None \
            and 200 <= status < 300 and status != 206


NOT_FETCHED_FIELD = "notFetched"  # the warc-fields name whose value says why a URL has no answer (jobs.warc.records)


@dataclass(frozen=True)
class NotFetched:
    """A URL the crawl is done with for now without an answer to record, and why: written as a lone `metadata`
    record (WARC 1.1 §6.6: "content created in order to further describe [...] a harvested resource"; Heritrix
    keeps the same in its crawl.log, as fetch status codes), so that the archive accounts for every URL."""
    url: str
    reason: str                                   # robots_denied | tdmrep_reserved | a network failure kind
    detail: str = ""
    date: str = field(default_factory=warc_date)


class DigestIndex(Protocol):
    """Where the first capture of each payload digest is kept (the frontier's, shared by every worker)."""

    def firsts(self, items: list[tuple[str, DigestSeen]]) -> list[DigestSeen | None]:
        """Atomic test-and-set of each (digest, seen), in order: None where the digest is new (`seen` is stored
        now), else the stored capture.  One call for a batch of fetches: one round trip to a shared index."""


class LocalDigestIndex:
    """A process-local DigestIndex, for a crawl without a frontier that shares one (and for tests)."""

    def __init__(self) -> None:
        self._first: dict[str, DigestSeen] = {}
        self._lock = threading.Lock()

    def firsts(self, items: list[tuple[str, DigestSeen]]) -> list[DigestSeen | None]:
        with self._lock:
            stored = [self._first.setdefault(digest, seen) for digest, seen in items]
        return [None if first is seen else first for first, (_, seen) in zip(stored, items)]


@dataclass(frozen=True)
class ClosedWarc:
    """A finished WARC file on the local disk and the fetches it holds, in file order."""
    path: Path
    bytes: int
    urls: tuple[str, ...]        # WARC-Target-URI of each response and revisit record (each is one fetch)
    record_ids: tuple[str, ...]  # WARC-Record-ID of each of those records, aligned with `urls`


@dataclass(frozen=True)
class Capture:
    """What a fetch's records need before they are built: the response record's id, the payload digest, and the
    capture of that payload stored first, if any (then the fetch is written as a revisit)."""
    record_id: str
    digest: str
    first: DigestSeen | None


@dataclass(frozen=True)
class Written:
    """What became of one fetch: the record id of its response or revisit record."""
    record_id: str
    revisit_of: DigestSeen | None  # the capture it refers to when written as a revisit


@dataclass
class WarcCounters:
    files: int = 0
    records: int = 0
    responses: int = 0  # response records
    revisits: int = 0   # revisit records (a payload already stored, or a 304 to a conditional recrawl)
    conversions: int = 0  # conversion records (rendered DOMs, spider/render)
    not_fetched: int = 0  # lone metadata records of URLs ended without an answer (NotFetched)
    bytes: int = 0      # compressed bytes of every file written, the open one included
    digest_index_errors: int = 0  # lookups that failed: those fetches were stored in full


class RotatingWarcWriter:
    """Writes fetches into `<dir>/<prefix>-<UTC yyyymmddHHMMSS>-<serial>-<pid>.warc.gz`.

    Not thread-safe: one thread owns a writer (spider/warc_thread.py).
    """

    def __init__(self, directory: str | os.PathLike, prefix: str, max_file_bytes: int,
                 warcinfo: dict[str, str], on_closed: Callable[[ClosedWarc], None] | None = None,
                 max_file_age_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.directory = Path(directory)
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self.max_file_age_s = max_file_age_s
        self.warcinfo = {"software": "weblm-spider (warcio, scrapy)", "format": "WARC File Format 1.1",
                         "conformsTo": WARC_SPEC, "hostname": socket.gethostname(), **warcinfo}
        self.counters = WarcCounters()
        self.closed_files: list[Path] = []
        self.on_closed = on_closed
        self._clock = clock
        self._builder = WARCWriter(None, gzip=True, warc_version=WARC_VERSION)  # builds records, writes none
        self._fetches: list[tuple[str, str]] = []  # (url, response/revisit record id) in the open file
        self._not_fetched = 0  # NotFetched records in the open file
        self._serial = 0
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._size = 0
        self._opened_at = 0.0
        self._closed_bytes = 0

    @property
    def has_fetches(self) -> bool:
        return bool(self._fetches)

    @property
    def _holds_records(self) -> bool:
        """The open file holds a fetch or a NotFetched record: worth closing now, so that it becomes durable."""
        return bool(self._fetches) or self._not_fetched > 0

    def write_fetch(self, url: str, request: StatusAndHeaders, request_body: bytes,
                    response: StatusAndHeaders, response_body: bytes,
                    ip_address: str | None = None, truncated: str | None = None) -> str:
        """Write one `response` record and its `request` record; returns the response's record id."""
        return self.write(Fetch(url, request, request_body, response, response_body,
                                ip_address=ip_address, truncated=truncated)).record_id

    def captures(self, fetches: list[Fetch], digests: DigestIndex | None = None) -> list[Capture]:
        """Each fetch's Capture; with `digests`, the first captures of all their payloads in one call of the index.
        A failed call costs disk space, never a record: those fetches are stored in full (counted, logged)."""
        record_ids = [fetch.record_id or StatusAndHeadersParser.make_warc_id() for fetch in fetches]
        found = [payload_digest(fetch.response_body) for fetch in fetches]
        firsts: list[DigestSeen | None] = [None] * len(fetches)
        asked = [i for i, fetch in enumerate(fetches) if fetch.revisitable()] if digests is not None else []
        if asked:
            try:
                answers = digests.firsts([(found[i], DigestSeen(fetches[i].url, fetches[i].date, record_ids[i]))
                                          for i in asked])
                for i, first in zip(asked, answers):
                    firsts[i] = first
            except Exception as exc:  # noqa: BLE001  (a lost lookup costs disk space, never a record)
                before = self.counters.digest_index_errors
                self.counters.digest_index_errors += len(asked)
                if before == 0 or before // 1000 < self.counters.digest_index_errors // 1000:
                    logger.warning("payload digest index failed (%s: %s); such fetches are stored in full, not as "
                                   "revisits (%d so far); check the frontier's store", type(exc).__name__, exc,
                                   self.counters.digest_index_errors)
        return [Capture(*capture) for capture in zip(record_ids, found, firsts)]

    def write(self, fetch: Fetch, digests: DigestIndex | None = None, capture: Capture | None = None) -> Written:
        """Write a fetch's records; with `digests`, a payload stored before becomes a revisit record.  `capture`:
        the fetch's Capture when the caller looked it up already (`captures()`, for a batch of fetches)."""
        capture = capture or self.captures([fetch], digests)[0]
        record_id, digest, first = capture.record_id, capture.digest, capture.first
        if fetch.not_modified:
            main = self._not_modified(fetch, record_id)
        elif first:
            main = self._revisit(fetch, digest, record_id, first)
        else:
            main = self._response(fetch, digest, record_id)
        records = [main]
        if fetch.metadata is not None:
            records.append(self._metadata(fetch, record_id))
        if fetch.rendered is not None:  # before the request, which stays the fetch's last record (warc_salvage.py)
            records.append(conversion_record(self._builder, fetch.url, record_id, fetch.date, fetch.rendered))
            self.counters.conversions += 1
        records.append(self._builder.create_warc_record(
            fetch.url, "request", payload=BytesIO(fetch.request_body), length=len(fetch.request_body),
            http_headers=fetch.request, warc_headers_dict={"WARC-Date": fetch.date, "WARC-Concurrent-To": record_id}))
        self._append(_serialize(records))
        self._fetches.append((fetch.url, record_id))
        self.counters.records += len(records)
        if first or fetch.not_modified:
            self.counters.revisits += 1
        else:
            self.counters.responses += 1
        self._after_write()
        return Written(record_id, first)

    def write_not_fetched(self, item: NotFetched) -> None:
        """Write a URL the crawl ended without an answer as a lone metadata record (`notFetched: <reason>`)."""
        record = self._fields_record(item.url, {NOT_FETCHED_FIELD: item.reason, "detail": item.detail or None},
                                     {"WARC-Date": item.date})
        self._append(_serialize([record]))
        self._not_fetched += 1
        self.counters.records += 1
        self.counters.not_fetched += 1
        self._after_write()

    def close(self) -> None:
        """Close the open file (if any) and rename it to its final name.  Safe to call twice."""
        if self._file is None:
            return
        assert self._path is not None
        os.fsync(self._file.fileno())
        size = self._size
        self._file.close()
        final = self._path.with_name(self._path.name[: -len(OPEN_SUFFIX)])
        os.replace(self._path, final)
        fsync_dir(final.parent)  # the rename is on disk too: the file cannot revert to .open after a crash
        self._closed_bytes += size
        self.counters.bytes = self._closed_bytes
        self.closed_files.append(final)
        logger.info("WARC file closed: %s (%d bytes, %d fetches, %d not fetched)", final, size, len(self._fetches),
                    self._not_fetched)
        urls, record_ids = zip(*self._fetches) if self._fetches else ((), ())
        self._file = self._path = None
        self._fetches = []
        self._not_fetched = 0
        if self.on_closed:
            self.on_closed(ClosedWarc(final, size, tuple(urls), tuple(record_ids)))

    def flush(self) -> bool:
        """Close the open file if it holds any fetch (or NotFetched record), so that it becomes durable now; True if
        one was closed."""
        if not self._holds_records:
            return False
        self.close()
        return True

    def close_if_old(self) -> bool:
        """Close the open file once it is `max_file_age_s` old: its fetches are acknowledged only when closed."""
        if self._holds_records and self._is_old():
            self.close()
            return True
        return False

    @staticmethod
    def _fetch_headers(fetch: Fetch, record_id: str) -> dict[str, str]:
        """The WARC fields every main record of a fetch carries: its id, its date and the address contacted."""
        headers = {"WARC-Record-ID": record_id, "WARC-Date": fetch.date}
        if fetch.ip_address:
            headers["WARC-IP-Address"] = fetch.ip_address
        return headers

    def _response(self, fetch: Fetch, digest: str, record_id: str):
        headers = {**self._fetch_headers(fetch, record_id), "WARC-Payload-Digest": digest}
        if fetch.truncated:
            headers["WARC-Truncated"] = fetch.truncated
        return self._builder.create_warc_record(fetch.url, "response", payload=BytesIO(fetch.response_body),
                                                length=len(fetch.response_body), http_headers=fetch.response,
                                                warc_headers_dict=headers)

    def _revisit(self, fetch: Fetch, digest: str, record_id: str, first: DigestSeen):
        """The HTTP head as received, no payload (WARC 1.1 §6.7.2), as warcio and Heritrix write it."""
        headers = self._fetch_headers(fetch, record_id)
        if first.record_id:
            headers["WARC-Refers-To"] = first.record_id
        return self._builder.create_revisit_record(fetch.url, digest, first.url, first.date,
                                                   http_headers=fetch.response, warc_headers_dict=headers)

    def _not_modified(self, fetch: Fetch, record_id: str):
        """A 304 to a conditional recrawl as Heritrix writes it: a revisit of the server-not-modified profile, the
        304's head as received, referring to the capture whose validators were sent when the frontier kept it
        (WARC-Refers-To, -Date); no WARC-Payload-Digest, which the profile forbids."""
        headers = {**self._fetch_headers(fetch, record_id), "WARC-Profile": NOT_MODIFIED_PROFILE,
                   "WARC-Refers-To-Target-URI": fetch.url}
        before = fetch.not_modified_of
        if before is not None:
            headers["WARC-Refers-To-Target-URI"] = before.url
            headers["WARC-Refers-To-Date"] = before.date
            if before.record_id:
                headers["WARC-Refers-To"] = before.record_id
        return self._builder.create_warc_record(fetch.url, "revisit", http_headers=fetch.response,
                                                warc_headers_dict=headers)

    def _metadata(self, fetch: Fetch, record_id: str):
        assert fetch.metadata is not None
        return self._fields_record(fetch.url, fetch.metadata, {"WARC-Date": fetch.date,
                                                               "WARC-Concurrent-To": record_id})

    def _fields_record(self, url: str, fields: dict[str, str | None], headers: dict[str, str]):
        """A `metadata` record of application/warc-fields (`name: value` lines; a None value is left out)."""
        body = "".join(f"{name}: {_one_line(value)}\r\n" for name, value in fields.items()
                       if value is not None).encode("utf-8")
        return self._builder.create_warc_record(url, "metadata", payload=BytesIO(body), length=len(body),
                                                warc_content_type="application/warc-fields",
                                                warc_headers_dict=headers)

    def _append(self, data: bytes) -> None:
        """Append whole records; on failure cut the file back, so it never holds part of a fetch."""
        if self._file is None:
            self._open_next()
        assert self._file is not None
        fd, start = self._file.fileno(), self._size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            try:
                os.ftruncate(fd, start)
                os.lseek(fd, start, os.SEEK_SET)
            except OSError as exc:
                logger.error("could not cut %s back to its last whole fetch after a failed write (%s); its "
                             "tail is damaged", self._path, exc)
                self._size = os.lseek(fd, 0, os.SEEK_END)
            raise
        self._size += len(data)

    def _open_next(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        name = f"{self.prefix}-{stamp}-{self._serial:05d}-{os.getpid()}.warc.gz"
        self._serial += 1
        path = self.directory / (name + OPEN_SUFFIX)
        info = _serialize([self._builder.create_warcinfo_record(name, self.warcinfo)])
        self._file = open(path, "xb", buffering=0)  # "x": never overwrite another writer's file
        self._path, self._size, self._opened_at = path, 0, self._clock()
        try:
            self._append(info)
        except OSError:  # a file without its warcinfo is no file: gone, and the next write tries a new one
            self._file.close()
            path.unlink(missing_ok=True)
            self._file = self._path = None
            raise
        self.counters.files += 1
        self.counters.records += 1
        self.counters.bytes = self._closed_bytes + self._size

    def _is_old(self) -> bool:
        return self.max_file_age_s is not None and self._clock() - self._opened_at >= self.max_file_age_s

    def _after_write(self) -> None:
        """Rotate once the file has reached its size or age: a fetch's records never straddle files."""
        self.counters.bytes = self._closed_bytes + self._size
        if self._size >= self.max_file_bytes or self._is_old():
            self.close()


def _serialize(records) -> bytes:
    """Records as gzip members, each its own (SEAMS §2), with their block digests."""
    out = BytesIO()
    writer = WARCWriter(out, gzip=True, warc_version=WARC_VERSION)
    for record in records:
        writer.write_record(record)
    return out.getvalue()


def _one_line(value: object) -> str:
    return " ".join(str(value).splitlines())  # a warc-fields value is one line
