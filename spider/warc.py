"""WARC/1.1 output: request/response pairs in size-rotated, gzip-per-record files (SEAMS §2).

warcio builds the records and computes WARC-Block-Digest and WARC-Payload-Digest (sha1, base32).
This module adds what warcio leaves to its caller: file naming, the `.open` -> final rename
that lets readers see only complete files, the warcinfo record at the head of every file,
and rotation by size.  It knows nothing of Scrapy, so it can be tested and reused alone.

A file is handed on (`on_closed`) only once it is fsynced and renamed and the rename itself is fsynced:
from then on a machine crash cannot take it back, which is what "durable" means for a local warc_dir.
"""
from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass
from http import HTTPStatus
from io import BytesIO
from pathlib import Path
from typing import BinaryIO, Callable, Iterable
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser
from warcio.warcwriter import WARCWriter

from storage import fsync_dir  # noqa: F401  (re-exported for the spider's modules)

logger = logging.getLogger(__name__)

OPEN_SUFFIX = ".open"
WARC_SPEC = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
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


@dataclass(frozen=True)
class ClosedWarc:
    """A finished WARC file on the local disk and the fetches it holds, in file order."""
    path: Path
    bytes: int
    urls: tuple[str, ...]        # WARC-Target-URI of each response record
    record_ids: tuple[str, ...]  # WARC-Record-ID of each response record, aligned with `urls`


@dataclass
class WarcCounters:
    files: int = 0
    records: int = 0
    responses: int = 0
    bytes: int = 0  # compressed bytes of every file written, the open one included


class RotatingWarcWriter:
    """Writes fetches into `<dir>/<prefix>-<UTC yyyymmddHHMMSS>-<serial>-<pid>.warc.gz`."""

    def __init__(self, directory: str | os.PathLike, prefix: str, max_file_bytes: int,
                 warcinfo: dict[str, str], on_closed: Callable[[ClosedWarc], None] | None = None):
        self.directory = Path(directory)
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self.warcinfo = {"software": "weblm-spider (warcio, scrapy)", "format": "WARC File Format 1.1",
                         "conformsTo": WARC_SPEC, "hostname": socket.gethostname(), **warcinfo}
        self.counters = WarcCounters()
        self.closed_files: list[Path] = []
        self.on_closed = on_closed
        self._fetches: list[tuple[str, str]] = []  # (url, response record id) in the open file
        self._serial = 0
        self._file: BinaryIO | None = None
        self._path: Path | None = None
        self._writer: WARCWriter | None = None
        self._closed_bytes = 0

    def write_fetch(self, url: str, request: StatusAndHeaders, request_body: bytes,
                    response: StatusAndHeaders, response_body: bytes,
                    ip_address: str | None = None, truncated: str | None = None) -> str:
        """Write one `response` record and its `request` record; returns the response's record id.

        `truncated` is the WARC-Truncated reason (WARC 1.1 §5.13) when the body is not whole.
        """
        writer = self._current_writer()
        warc_headers = {"WARC-IP-Address": ip_address} if ip_address else {}
        if truncated:
            warc_headers["WARC-Truncated"] = truncated
        resp = writer.create_warc_record(url, "response", payload=BytesIO(response_body),
                                         length=len(response_body), http_headers=response,
                                         warc_headers_dict=warc_headers)
        req = writer.create_warc_record(url, "request", payload=BytesIO(request_body),
                                        length=len(request_body), http_headers=request)
        writer.write_request_response_pair(req, resp)  # sets WARC-Concurrent-To on the request
        record_id = resp.rec_headers.get_header("WARC-Record-ID")
        self._fetches.append((url, record_id))
        self.counters.records += 2
        self.counters.responses += 1
        self._after_write()
        return record_id

    def close(self) -> None:
        """Close the open file (if any) and rename it to its final name.  Safe to call twice."""
        if self._file is None:
            return
        assert self._path is not None
        self._file.flush()
        os.fsync(self._file.fileno())
        size = self._file.tell()
        self._file.close()
        final = self._path.with_name(self._path.name[: -len(OPEN_SUFFIX)])
        os.replace(self._path, final)
        fsync_dir(final.parent)  # the rename is on disk too: the file cannot revert to .open after a crash
        self._closed_bytes += size
        self.counters.bytes = self._closed_bytes
        self.closed_files.append(final)
        logger.info("WARC file closed: %s (%d bytes)", final, size)
        urls, record_ids = zip(*self._fetches) if self._fetches else ((), ())
        self._file = self._path = self._writer = None
        self._fetches = []
        if self.on_closed:
            self.on_closed(ClosedWarc(final, size, tuple(urls), tuple(record_ids)))

    def _current_writer(self) -> WARCWriter:
        if self._writer is None:
            self._open_next()
        assert self._writer is not None
        return self._writer

    def _open_next(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        name = f"{self.prefix}-{stamp}-{self._serial:05d}-{os.getpid()}.warc.gz"
        self._serial += 1
        self._path = self.directory / (name + OPEN_SUFFIX)
        self._file = open(self._path, "xb")  # "x": never overwrite another writer's file
        self._writer = WARCWriter(self._file, gzip=True, warc_version="WARC/1.1")
        self._writer.write_record(self._writer.create_warcinfo_record(name, self.warcinfo))
        self.counters.files += 1
        self.counters.records += 1
        self.counters.bytes = self._closed_bytes + self._file.tell()

    def _after_write(self) -> None:
        """Rotate once the file has reached its size: a fetch's two records never straddle files."""
        assert self._file is not None
        size = self._file.tell()
        self.counters.bytes = self._closed_bytes + size
        if size >= self.max_file_bytes:
            self.close()


