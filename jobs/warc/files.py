"""One WARC or ARC file -> its page rows, its skip rows, and a summary that accounts for every record.

`read_warc(path)` never raises for bad input.  It yields one row per record (`kind` "page" or
"skip", see `jobs.warc.records`) and ends with one `kind` "file" row: `records_seen`, `rows`,
`skips` by reason, `status` and `error`.

`records_seen` comes from an independent pass that only counts record starts (the reader's `count`,
which parses no payload).  Whatever the main pass could not turn into a row or a skip is a counted
skip (`unread_after_error`), so for every file, truncated and garbage ones included,

    records_seen == rows + sum(skips)

Status: `ok` when every record was read to its end; `partial` when records were read and then the
file turned out damaged (cut, corrupt, trailing bytes); `failed` when it could not be opened or
nothing in it could be read.  Files are opened with `storage.open_file`: local paths and s3:// alike.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterator

import storage
from jobs.config import IngestSettings
from jobs.warc.readers import reader_for, unread_tail
from jobs.warc.records import page_or_skip, skip_row


@dataclass
class _Pass:
    """What one pass over a file saw: record starts, where the last one began, how it ended."""
    records: int = 0
    last_offset: int | None = None
    error: str | None = None

    @property
    def clean(self) -> bool:
        return self.error is None


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text}"[:400]


def _count_pass(path: str, reader) -> _Pass:
    """The independent pass: record starts only; an unparseable rest counts as one record start."""
    seen = _Pass()
    with storage.open_file(path, "rb") as stream:
        try:
            for offset in reader.count(stream):
                seen.records += 1
                seen.last_offset = offset
        except Exception as exc:  # noqa: BLE001  (any library error ends the pass, and is counted)
            seen.records += 1
            seen.error = _describe(exc)
    return seen


def _tail(path: str, last_offset: int | None, size: int) -> int:
    """Bytes after the last record that no reader turned into a record (a cut in a member's first bytes)."""
    if last_offset is None:
        return size  # no record at all: every byte of a non-empty file is unread
    try:
        with storage.open_file(path, "rb") as stream:
            return unread_tail(stream, last_offset)
    except Exception:  # noqa: BLE001  (the check is a safety net: if it cannot run, the passes' counts stand)
        return 0


def read_warc(path: str, cfg: IngestSettings, *, warc_file: str | None = None) -> Iterator[dict]:
    """Every record of one file as a page or a skip, then the file's summary row; never raises for bad input.

    `cfg` is `conf/jobs.yaml`'s ingest section (`record_types`, `max_payload_bytes`); `warc_file`
    names the file in the rows (default: `path`).
    """
    name = warc_file or path
    reader = reader_for(path)
    keep = frozenset(cfg.record_types)
    max_payload_bytes = cfg.max_payload_bytes
    skips: Counter = Counter()
    rows = 0
    errors: list[str] = []

    def skip(reason: str, detail: str, offset: int | None, *, damage: bool = True) -> dict:
        skips[reason] += 1
        if damage and len(errors) < 3:
            errors.append(f"{reason} at offset {offset}: {detail}")
        row = skip_row(reason, detail, name, offset)
        row["kind"] = "skip"
        return row

    try:
        size = storage.size(path)
        independent = _count_pass(path, reader)
    except Exception as exc:  # noqa: BLE001  (missing, unreadable, permission denied: the file fails, the job goes on)
        yield _summary(name, reader.name, 0, 0, skips, f"cannot open: {_describe(exc)}; check that the file "
                       "exists and this job may read it", read_any=False)
        return

    main = _Pass()
    try:
        with storage.open_file(path, "rb") as stream:
            records = reader.records(stream)
            while True:
                try:
                    record = next(records)
                except StopIteration:
                    break
                except Exception as exc:  # noqa: BLE001  (a library error is this file's damage, never the job's)
                    main.records += 1
                    main.error = _describe(exc)
                    if main.last_offset is None:
                        yield skip("not_warc", f"nothing readable from the start: {main.error}; is this a "
                                   "complete WARC/ARC file?", 0)
                    else:
                        yield skip("malformed_record", f"the record after this one: {main.error}", main.last_offset)
                    break
                main.records += 1
                try:
                    offset = record.offset
                    main.last_offset = offset
                    if not record.has_length:
                        record.finish()
                        yield skip("malformed_record", f"{record.rec_type or 'untyped'} record without a valid Content-Length: "
                                   "its WARC headers are cut short or malformed", offset)
                        continue
                    row = page_or_skip(record, name, keep, max_payload_bytes)
                except Exception as exc:  # noqa: BLE001  (one bad record must not hide the rest of the file)
                    yield skip("unreadable_record", _describe(exc), main.last_offset)
                    continue
                if row["skip_reason"] is None:
                    rows += 1
                    row["kind"] = "page"
                    yield row
                else:
                    reason = row["skip_reason"]
                    skips[reason] += 1
                    if reason == "truncated_record" and len(errors) < 3:
                        errors.append(f"truncated_record at offset {row['warc_offset']}: {row['skip_detail']}")
                    row["kind"] = "skip"
                    yield row
    except Exception as exc:  # noqa: BLE001  (open or close failed between the two passes)
        main.error = _describe(exc)
        errors.append(f"reading stopped: {main.error}")

    if main.clean or independent.clean:
        tail = _tail(path, main.last_offset if main.clean else independent.last_offset, size)
        if tail:
            if main.clean:
                main.records += 1
                yield skip("unread_bytes", f"{tail} bytes after the last record form no record: the file is "
                           "cut in the first bytes of a record", main.last_offset or 0)
            if independent.clean:
                independent.records += 1
    outcomes = rows + sum(skips.values())
    if independent.records > outcomes:
        missing = independent.records - outcomes
        errors.append(f"{missing} records after the first error were not read")
        for _ in range(missing):  # one row per record, like every other skip
            yield skip("unread_after_error", f"the counting pass saw {independent.records} records, the "
                       f"reading pass stopped after {outcomes}", None, damage=False)
    seen = max(independent.records, outcomes)
    if outcomes > independent.records:
        errors.append(f"the counting pass saw {independent.records} records, the reading pass {outcomes}")
    if seen == 0 and not errors:
        errors.append("no records: the file is empty" if size == 0 else f"no records in {size} bytes")
    yield _summary(name, reader.name, seen, rows, skips, "; ".join(errors) or None,
                   read_any=main.last_offset is not None)


def _summary(name: str, reader: str, seen: int, rows: int, skips: Counter, error: str | None, *,
             read_any: bool) -> dict:
    status = "ok" if error is None else ("partial" if read_any else "failed")
    return {"kind": "file", "warc_file": name, "records_seen": seen, "rows": rows,
            "skips": dict(sorted(skips.items())), "status": status, "error": error, "reader": reader}
