"""WARC file -> bronze.pages rows (SEAMS §2 -> §3), one pure function per file, no Spark.

`read_warc(path)` yields one dict per WARC record: a page (the bronze columns, `skip_reason`
None) or a skip (`skip_reason`, `skip_detail`, and where: `warc_file`, `warc_offset`).  A
broken record or file never raises: it becomes a skip, every good record before it is kept,
and the caller moves on to the next file.
"""
from __future__ import annotations

import hashlib
import re
import zlib
from datetime import timezone
from typing import Iterable, Iterator
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import BufferedReader
from warcio.exceptions import ArchiveLoadFailed
from warcio.timeutils import iso_date_to_datetime

# bronze.pages, in SEAMS §3 order
BRONZE_COLUMNS = ("doc_id", "url", "host", "fetch_time", "status", "content_type", "headers", "html",
                  "charset", "payload_digest", "warc_file", "warc_offset", "warc_record_id")
SKIP_COLUMNS = ("skip_reason", "skip_detail")

_CHARSET = re.compile(r"charset\s*=\s*[\"']?([^\"';\s]+)", re.I)


def _install_brotli_fix() -> None:
    """warcio 1.8.1 sets `unused_data` on brotli's Decompressor, which brotli >= 1.1 forbids
    (AttributeError on every `br` payload); register a small adapter instead."""
    try:
        import brotli
    except ImportError:  # warcio then leaves br payloads undecoded, as documented
        return

    class BrotliDecompressor:
        unused_data = None  # warcio reads it to find a next gzip member; brotli streams have none

        def __init__(self) -> None:
            self._inner = brotli.Decompressor()

        def decompress(self, data: bytes) -> bytes:
            return self._inner.process(data)

    BufferedReader.DECOMPRESSORS["br"] = BrotliDecompressor


_install_brotli_fix()


def doc_id_for(record_id: str) -> str:
    """SEAMS §3: sha1 hex of the response's WARC-Record-ID, as written (with `<urn:uuid:...>`)."""
    return hashlib.sha1(record_id.encode("utf-8")).hexdigest()


def parse_content_type(value: str | None) -> tuple[str | None, str | None]:
    """`text/html; charset=UTF-8` -> (`text/html`, `utf-8`)."""
    if not value:
        return None, None
    media_type = value.split(";", 1)[0].strip().lower() or None
    match = _CHARSET.search(value)
    return media_type, (match.group(1).strip().lower() if match else None)


def _skip(reason: str, detail: str, warc_file: str, offset: int | None) -> dict:
    row = dict.fromkeys(BRONZE_COLUMNS)
    row.update(warc_file=warc_file, warc_offset=offset, skip_reason=reason, skip_detail=detail[:500])
    return row


def _page(record, records: ArchiveIterator, warc_file: str, max_payload_bytes: int) -> dict:
    """One response record -> a bronze row or a skip."""
    payload, problem, short_by = None, None, 0
    http = record.http_headers
    if http is not None and http.get_statuscode():
        try:
            payload = record.content_stream().read(max_payload_bytes + 1)
            short_by = record.raw_stream.limit  # > 0: the block ended before its Content-Length
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            problem = f"{type(exc).__name__}: {exc}"
    # warcio knows a record's offset only once the record has been read to its end
    offset = records.get_record_offset()
    rec = record.rec_headers
    url = rec.get_header("WARC-Target-URI") or ""
    record_id = rec.get_header("WARC-Record-ID")
    if not record_id:
        return _skip("missing_record_id", f"{url}: response without WARC-Record-ID", warc_file, offset)
    if http is None or not http.get_statuscode():
        return _skip("no_http_payload", f"{url}: no HTTP status line", warc_file, offset)
    try:
        status = int(http.get_statuscode())
    except ValueError:
        return _skip("bad_status_line", f"{url}: status {http.get_statuscode()!r}", warc_file, offset)
    if problem:
        return _skip("payload_decode_error", f"{url}: {problem}", warc_file, offset)
    if len(payload) > max_payload_bytes:
        return _skip("payload_too_large", f"{url}: decoded payload > {max_payload_bytes} bytes", warc_file, offset)
    if short_by > 0:
        return _skip("truncated_record", f"{url}: block is {short_by} bytes short of "
                     f"Content-Length {record.length}", warc_file, offset)
    content_type, charset = parse_content_type(http.get_header("Content-Type"))
    headers: dict[str, str] = {}
    for name, value in http.headers:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value  # RFC 9110 §5.3 field combining
    date = rec.get_header("WARC-Date")
    try:
        fetch_time = iso_date_to_datetime(date).replace(tzinfo=timezone.utc) if date else None
    except ValueError:
        fetch_time = None
    return {"doc_id": doc_id_for(record_id), "url": url, "host": (urlsplit(url).hostname or "").lower() or None,
            "fetch_time": fetch_time, "status": status, "content_type": content_type, "headers": headers,
            "html": payload, "charset": charset, "payload_digest": rec.get_header("WARC-Payload-Digest"),
            "warc_file": warc_file, "warc_offset": offset, "warc_record_id": record_id,
            "skip_reason": None, "skip_detail": None}


def read_warc(path: str, *, record_types: Iterable[str] = ("response",),
              max_payload_bytes: int = 32 * 1024 * 1024, warc_file: str | None = None) -> Iterator[dict]:
    """Every record of one WARC file as a page or a skip; never raises for bad input."""
    name = warc_file or path
    keep = set(record_types)
    offset: int | None = 0
    try:
        with open(path, "rb") as stream:
            records = ArchiveIterator(stream)
            for record in records:
                if record.format != "warc":  # warcio reads any line with spaces as an ARC header
                    yield _skip("not_warc", f"{record.format} record at offset {records.get_record_offset()}; "
                                "SEAMS §2 files are WARC", name, records.get_record_offset())
                    return
                if record.rec_type not in keep:
                    offset = records.get_record_offset()
                    yield _skip("other_record_type", record.rec_type or "?", name, offset)
                    continue
                page = _page(record, records, name, max_payload_bytes)
                offset = page["warc_offset"]
                yield page
    except ArchiveLoadFailed as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable record"
        yield _skip("malformed_record", f"after offset {offset}: {first_line}", name, offset)
    except (EOFError, zlib.error, OSError) as exc:  # cut gzip member, bad gzip data, I/O error
        yield _skip("truncated_file", f"after offset {offset}: {type(exc).__name__}: {exc}", name, offset)


def read_warcs(paths: Iterable[str], **kwargs) -> Iterator[dict]:
    """`mapPartitions` body: the records of each file in turn."""
    for path in paths:
        yield from read_warc(path, **kwargs)
