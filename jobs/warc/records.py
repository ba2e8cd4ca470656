"""One WARC/ARC record -> one bronze.pages row or one counted skip (SEAMS §3), no Spark, no I/O.

`page_or_skip(record, ...)` turns a record from `jobs.warc.readers` into a row dict: a page (the
bronze columns, `skip_reason` None) or a skip (`skip_reason`, `skip_detail`, and where: `warc_file`,
`warc_offset`).  Reading whole files, and accounting for every record of them, is `jobs.warc.files`.
A crawl's record of a URL it did not fetch (a lone metadata record with a `notFetched` field, spider/warc.py) is a
`not_fetched` skip that also carries the URL, its host, the date, the record id and the fields (`headers`):
ingest keeps those in bronze.unfetched.
"""
from __future__ import annotations

import hashlib
import re
import zlib
from datetime import datetime, timezone
from urllib.parse import urlsplit

from warcio.bufferedreaders import BufferedReader
from warcio.timeutils import iso_date_to_datetime

# bronze.pages, in SEAMS §3 order
BRONZE_COLUMNS = ("doc_id", "url", "host", "fetch_time", "status", "content_type", "headers", "html",
                  "charset", "payload_digest", "warc_file", "warc_offset", "warc_record_id")
SKIP_COLUMNS = ("skip_reason", "skip_detail")

# in `headers` when the WARC record says its payload is not whole (WARC-Truncated, WARC 1.1 §5.13): the reason,
# lower case (`length`, `time`, `disconnect`, `unspecified`); the page is kept, and ingest counts it
TRUNCATED = "x-weblm-warc-truncated"
NOT_FETCHED = "not_fetched"   # the skip reason of a crawl's record of a URL it did not fetch
NOT_FETCHED_FIELD = "notfetched"  # its warc-fields name (spider/warc.py writes `notFetched`), lower-cased
_FIELDS_BYTES = 64 * 1024   # a NotFetched record is a few lines; more than this is not one
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
    """`text/html; charset=UTF-8` -> (`text/html`, `utf-8`).
    Not w3lib's `http_content_type_encoding`: bronze keeps the label as sent, not its codec (ISO-8859-1 -> cp1252)."""
    if not value:
        return None, None
    media_type = value.split(";", 1)[0].strip().lower() or None
    match = _CHARSET.search(value)
    return media_type, (match.group(1).strip().lower() if match else None)


def host_of(url: str) -> str | None:
    try:
        return (urlsplit(url).hostname or "").lower() or None
    except ValueError:  # e.g. an unbalanced IPv6 bracket: the page is kept, its host is unknown
        return None


def skip_row(reason: str, detail: str, warc_file: str, offset: int | None) -> dict:
    row = dict.fromkeys(BRONZE_COLUMNS)
    row.update(warc_file=warc_file, warc_offset=offset, skip_reason=reason,
               skip_detail=" ".join(detail.split())[:500])  # one line in logs and metrics
    return row


def _fetch_time(rec) -> datetime | None:
    date = rec.get_header("WARC-Date")
    try:
        return iso_date_to_datetime(date).replace(tzinfo=timezone.utc) if date else None
    except ValueError:
        return None


def warc_fields(block: bytes) -> dict[str, str]:
    """An application/warc-fields block (`Name: value` lines, as WARC 1.1 defines them) as {lower-cased name: value}.
    By hand: warcio reads such lines only after a status line (StatusAndHeadersParser), which a block has not."""
    fields = {}
    for line in block.decode("utf-8", errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            fields.setdefault(name.strip().lower(), value.strip())
    return fields


def _not_fetched(record, warc_file: str) -> dict | None:
    """A crawl's lone metadata record of a URL it did not fetch as a `not_fetched` skip with its URL and fields;
    None for any other record (then nothing of it has been read)."""
    rec = record.rec_headers
    if record.rec_type != "metadata" or rec.get_header("WARC-Concurrent-To") \
            or "warc-fields" not in (rec.get_header("Content-Type") or "") or record.length > _FIELDS_BYTES:
        return None
    fields = warc_fields(record.block(_FIELDS_BYTES))
    short_by = record.finish()
    url = rec.get_header("WARC-Target-URI") or ""
    reason = fields.get(NOT_FETCHED_FIELD)
    if short_by > 0 or not reason:
        return skip_row("truncated_record" if short_by > 0 else "other_record_type",
                        f"metadata record: block is {short_by} bytes short of Content-Length {record.length}"
                        if short_by > 0 else "metadata", warc_file, record.offset)
    row = skip_row(NOT_FETCHED, f"{url}: {reason}", warc_file, record.offset)
    record_id = rec.get_header("WARC-Record-ID")
    row.update(doc_id=doc_id_for(record_id) if record_id else None, url=url, host=host_of(url),
               fetch_time=_fetch_time(rec), content_type="application/warc-fields", headers=fields,
               warc_record_id=record_id)
    return row


def page_or_skip(record, warc_file: str, record_types: frozenset[str], max_payload_bytes: int) -> dict:
    """One record (`jobs.warc.readers.Record`) -> a bronze row or a skip; reads the record to its end."""
    if record.rec_type not in record_types:
        not_fetched = _not_fetched(record, warc_file)
        if not_fetched is not None:
            return not_fetched
        short_by = record.finish()
        if short_by > 0:
            return skip_row("truncated_record", f"{record.rec_type} record: block is {short_by} bytes short of "
                            f"Content-Length {record.length}", warc_file, record.offset)
        return skip_row("other_record_type", record.rec_type or "?", warc_file, record.offset)
    rec = record.rec_headers
    url = rec.get_header("WARC-Target-URI") or ""
    record_id = rec.get_header("WARC-Record-ID")
    http = record.http_headers
    payload, problem = None, None
    if http is not None and http.get_statuscode():
        try:
            payload = record.content_stream().read(max_payload_bytes + 1)
        except (OSError, EOFError, ValueError, zlib.error) as exc:
            problem = f"{type(exc).__name__}: {exc}"
    short_by = record.finish()  # > 0: the block ended before its Content-Length
    offset = record.offset
    if short_by > 0:  # first: a cut block explains a missing status line or a payload that fails to decode
        return skip_row("truncated_record", f"{url}: block is {short_by} bytes short of "
                        f"Content-Length {record.length}", warc_file, offset)
    if not record_id:
        return skip_row("missing_record_id", f"{url}: response without WARC-Record-ID", warc_file, offset)
    if http is None or not http.get_statuscode():
        return skip_row("no_http_payload", f"{url}: no HTTP status line", warc_file, offset)
    try:
        status = int(http.get_statuscode())
    except ValueError:
        return skip_row("bad_status_line", f"{url}: status {http.get_statuscode()!r}", warc_file, offset)
    if problem:
        return skip_row("payload_decode_error", f"{url}: {problem}", warc_file, offset)
    if len(payload) > max_payload_bytes:
        return skip_row("payload_too_large", f"{url}: decoded payload > {max_payload_bytes} bytes", warc_file, offset)
    content_type, charset = parse_content_type(http.get_header("Content-Type"))
    headers: dict[str, str] = {}
    for name, value in http.headers:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value  # RFC 9110 §5.3 field combining
    truncated = rec.get_header("WARC-Truncated")
    if truncated is not None:   # the crawler cut the body (Common Crawl at 1 MiB: `length`; ours on a lost connection)
        headers[TRUNCATED] = truncated.strip().lower() or "unspecified"
    fetch_time = _fetch_time(rec)
    return {"doc_id": doc_id_for(record_id), "url": url, "host": host_of(url),
            "fetch_time": fetch_time, "status": status, "content_type": content_type, "headers": headers,
            "html": payload, "charset": charset, "payload_digest": rec.get_header("WARC-Payload-Digest"),
            "warc_file": warc_file, "warc_offset": offset, "warc_record_id": record_id,
            "skip_reason": None, "skip_detail": None}
