"""The libraries that read records, behind one small interface: FastWARC for WARC, warcio for ARC.

Measured on ../shared/data/warc (`bench/warc_readers.py`): FastWARC frames WARC records about 2.5x
faster than warcio and also reads `.warc.lz4` and single-stream gzip files, which warcio refuses;
warcio reads ARC, which FastWARC does not.  Inside a WARC record we keep warcio's HTTP parsing and
payload decoding: FastWARC's own HTTP parser loses bodies that warcio reads (LF-only header lines,
a status line without a reason phrase) and its chunked decoder stops the whole file on one
mislabelled `Transfer-Encoding: chunked` response, where warcio falls back to the raw body.

A reader yields `Record`s from an open binary stream and can count record starts without parsing
payloads (`count`), which `jobs.warc.files` uses as its independent pass.
"""
from __future__ import annotations

import abc

import uuid
import zlib
from typing import IO, Iterator

from warcio.archiveiterator import ArchiveIterator as WarcioIterator
from warcio.recordloader import ArcWarcRecord, ArcWarcRecordLoader
from warcio.statusandheaders import StatusAndHeaders

ARC_SUFFIXES = (".arc", ".arc.gz")  # ARC 1.0 (pre-2009 Internet Archive crawls); everything else is WARC
_GZIP_MAGIC = b"\x1f\x8b"
_LZ4_MAGIC = b"\x04\x22\x4d\x18"  # LZ4 frame format, RFC-less but fixed by the lz4 frame spec §3
_CHUNK = 1 << 16


class Record(abc.ABC):
    """One record, whichever library read it: WARC headers, HTTP headers, payload, where it starts."""

    rec_type: str
    rec_headers: StatusAndHeaders
    length: int  # the block's Content-Length, as the record says

    @property
    @abc.abstractmethod
    def offset(self) -> int | None:
        """Where the record starts in the file as stored (compressed offset for per-record gzip/lz4)."""
        ...

    @property
    @abc.abstractmethod
    def http_headers(self) -> StatusAndHeaders | None:
        ...

    def content_stream(self) -> IO[bytes]:
        """The HTTP payload, transfer- and content-decoded (warcio's rules, lenient)."""
        return ArcWarcRecord("warc", self.rec_type, self.rec_headers, self._raw(), self.http_headers,
                             None, self.length).content_stream()

    @abc.abstractmethod
    def finish(self) -> int:
        """Read the record to its end; returns how many bytes short of Content-Length its block was."""
        ...

    def _raw(self) -> IO[bytes]:
        """The raw block, for the default `content_stream`; a reader that overrides that needs none."""
        raise TypeError(f"{type(self).__name__} keeps Record.content_stream, so it must define _raw()")

    def block(self, limit: int) -> bytes:
        """The first `limit` bytes of the record's block as stored (a metadata record's fields)."""
        return self._raw().read(limit)


# -- WARC: FastWARC frames records, warcio parses HTTP inside them ----------------------------------
_HTTP_LOADER = ArcWarcRecordLoader(verify_http=False)  # warcio's own lenient settings for ArchiveIterator


class FastWarcRecord(Record):
    def __init__(self, record) -> None:
        self._record = record
        self.rec_headers = StatusAndHeaders("", list(record.headers.items()), protocol="WARC/1.1")
        # warcio's fix-ups of WARC-Target-URI (`<...>` from wget 1.19, spaces), so URLs match what warcio gave
        self._uri = _HTTP_LOADER._ensure_target_uri_format(self.rec_headers) or ""
        self.rec_type = next(iter((self.rec_headers.get_header("WARC-Type") or "").lower().split()), "")
        self.length = record.content_length
        self.has_length = (self.rec_headers.get_header("Content-Length") or "").strip().isdigit()
        self._http: StatusAndHeaders | None | bool = False  # False: not parsed yet

    @property
    def offset(self) -> int:
        return self._record.stream_pos

    @property
    def http_headers(self) -> StatusAndHeaders | None:
        if self._http is False:
            try:
                self._http = _HTTP_LOADER.load_http_headers(self.rec_type, self._uri, self._record.reader, self.length)
            except EOFError:  # an empty block where HTTP headers belong
                self._http = None
        return self._http

    def _raw(self):
        return self._record.reader

    def finish(self) -> int:
        self._record.reader.consume()
        return self.length - self._record.reader.tell()


class FastWarcReader:
    """WARC/1.0 and 1.1, plain, gzip (per record or one stream) and lz4, compression detected by FastWARC."""

    name = "fastwarc"

    def records(self, stream: IO[bytes]) -> Iterator[FastWarcRecord]:
        from fastwarc.warc import ArchiveIterator

        for record in ArchiveIterator(stream, parse_http=False):
            yield FastWarcRecord(record)

    def count(self, stream: IO[bytes]) -> Iterator[int]:
        """The offset of each record start, reading no payload (FastWARC skips blocks unparsed)."""
        from fastwarc.warc import ArchiveIterator

        for record in ArchiveIterator(stream, parse_http=False):
            yield record.stream_pos


# -- ARC: warcio, converted to WARC-style headers ---------------------------------------------------
class WarcioRecord(Record):
    def __init__(self, record, records: WarcioIterator) -> None:
        self._record = record
        self._records = records
        self.rec_headers = record.rec_headers
        self.rec_type = record.rec_type or ""
        self.length = int(record.length or 0)
        self.has_length = True  # ARC header lines always carry a length, or warcio raises
        # ARC has no record ids: warcio invents a random WARC-Record-ID per read, doc_id must not change
        self.rec_headers.replace_header("WARC-Record-ID", arc_record_id(record.rec_headers))

    @property
    def offset(self) -> int:
        return self._records.get_record_offset()  # warcio reads the record to its end to know this

    @property
    def http_headers(self) -> StatusAndHeaders | None:
        return self._record.http_headers

    def content_stream(self) -> IO[bytes]:
        return self._record.content_stream()

    def block(self, limit: int) -> bytes:
        return self._record.raw_stream.read(limit)

    def finish(self) -> int:
        raw = self._record.raw_stream
        while raw.read(_CHUNK):
            pass
        return max(0, raw.limit)  # LimitReader: what the block still owed when the stream ended


def arc_record_id(headers: StatusAndHeaders) -> str:
    """A stable WARC-Record-ID for an ARC record, from its header line (URL, IP, date, length)."""
    line = " ".join(headers.get_header(h) or "" for h in
                    ("WARC-Target-URI", "WARC-IP-Address", "WARC-Date", "Content-Length"))
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'arc:' + line)}>"


class WarcioArcReader:
    """ARC 1.0, plain or gzip per record; warcio converts each header line to WARC headers."""

    name = "warcio"

    def records(self, stream: IO[bytes]) -> Iterator[WarcioRecord]:
        records = WarcioIterator(stream, arc2warc=True)
        for record in records:
            yield WarcioRecord(record, records)

    def count(self, stream: IO[bytes]) -> Iterator[int]:
        records = WarcioIterator(stream, no_record_parse=True, arc2warc=True)
        for _ in records:
            yield records.get_record_offset()


def reader_for(path: str) -> FastWarcReader | WarcioArcReader:
    return WarcioArcReader() if path.lower().endswith(ARC_SUFFIXES) else FastWarcReader()


# -- what no reader reports -------------------------------------------------------------------------
def unread_tail(stream: IO[bytes], last_offset: int) -> int:
    """Bytes after the gzip member or lz4 frame that starts at `last_offset` (the last record read).

    Both libraries end silently when a file is cut in the first bytes of a gzip member or lz4 frame
    (measured: cuts 1-67 bytes into the last member of a gzip-per-record WARC), so the record that
    was starting there would vanish; this decodes the last member once more, with zlib or lz4, to see
    whether the file goes on after it.  A plain file needs no check: a cut there is a parse error.
    """
    stream.seek(last_offset)
    head = stream.read(4)
    stream.seek(last_offset)
    if head[:2] == _GZIP_MAGIC:
        decoder = zlib.decompressobj(wbits=31)
        while not decoder.eof:
            data = decoder.unconsumed_tail or stream.read(_CHUNK)
            if not data:
                return 0  # the last member is itself cut: its record was already reported short
            try:
                decoder.decompress(data, _CHUNK)  # output discarded and bounded: a gzip bomb stays small
            except zlib.error:
                return 0  # damage inside the member: the record's own read reported it
    elif head == _LZ4_MAGIC:
        import lz4.frame

        decoder = lz4.frame.LZ4FrameDecompressor()
        while not decoder.eof:
            data = stream.read(_CHUNK // 4)  # 16 KiB in, at most ~4 MiB out (lz4's ratio is bounded by 255)
            if not data:
                return 0
            try:
                decoder.decompress(data)
            except RuntimeError:
                return 0
    else:
        return 0
    rest = len(decoder.unused_data or b"")
    while data := stream.read(_CHUNK):
        rest += len(data)
    return rest
