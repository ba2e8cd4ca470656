"""What a killed crawl leaves in the WARC buffer, made whole: `.warc.gz.open` files cut off mid-write.

Why not upload such a file as it is: its last gzip member is usually cut short, and warcio reads a cut
member without complaint, so readers would take a truncated record for a whole one.  Why not throw it
away: every fetch before the cut is whole and real.  So `salvage()` keeps the file up to the end of its
last whole fetch (the writer puts each record in its own gzip member and writes a fetch as response then
request, so that point is the end of a complete request record) or of a lone metadata record written after it (a
URL not fetched, spider/warc.py's NotFetched: whole on its own) and renames it
`<name>.salvaged.warc.gz`: a complete WARC file, read by ingest like any other, whose name says the crawl
that wrote it was killed.  What is cut off is a partial record whose URL was never acknowledged as
durable (spider/signals.py), so the frontier fetches it again.

A tail that a kill cannot explain (bytes after the last whole member that are neither a partial gzip
member nor the zeros a power loss leaves) is damage, not truncation: the original is then kept beside the
salvaged copy as `<name>.damaged`, never uploaded or deleted by the crawl, for a person to look at.
"""
from __future__ import annotations

import logging
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.limitreader import LimitReader

from spider.warc import OPEN_SUFFIX, fsync_dir

logger = logging.getLogger(__name__)

SALVAGED_SUFFIX = ".salvaged.warc.gz"
DAMAGED_SUFFIX = ".damaged"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Salvage:
    source: Path
    salvaged: Path | None  # the complete file made from it; None when it held no whole fetch or NotFetched record
    damaged: Path | None   # the original, kept because its tail is not a plain truncation
    fetches: int
    kept_bytes: int
    dropped_bytes: int


def salvage(open_path: Path) -> Salvage:
    """Turn a `.warc.gz.open` file of a dead writer into `<name>.salvaged.warc.gz` (see the module doc)."""
    size = open_path.stat().st_size
    with open(open_path, "rb") as stream:
        member_ends, tail = _complete_members(stream)
        whole_end = member_ends[-1] if member_ends else 0
        if tail == "error":
            tail = "zeros" if _cut_then_zeros(stream, whole_end) else "damaged"
        stream.seek(0)
        keep, fetches = _whole_fetches(stream, whole_end, set(member_ends))
    stem = open_path.name[: -len(OPEN_SUFFIX)].removesuffix(".warc.gz")
    salvaged = open_path.with_name(stem + SALVAGED_SUFFIX) if keep else None  # fetches, NotFetched records
    damaged = open_path.with_name(stem + ".warc.gz" + DAMAGED_SUFFIX) if tail == "damaged" else None
    if damaged is not None:
        if salvaged is not None:
            _copy_prefix(open_path, salvaged, keep)
        os.replace(open_path, damaged)
    elif salvaged is not None:
        os.truncate(open_path, keep)
        with open(open_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(open_path, salvaged)
    else:
        open_path.unlink()
    fsync_dir(open_path.parent)
    result = Salvage(open_path, salvaged, damaged, fetches, keep, size - keep)
    if damaged is not None:
        logger.error("%s is damaged after byte %d (not a cut-off write): its %d whole fetch(es) were copied to "
                     "%s and the original is kept as %s; look at it, then delete it", open_path, whole_end,
                     fetches, salvaged, damaged)
    elif salvaged is not None:
        logger.warning("%s was left open by a killed crawl: its %d whole fetch(es) (%d bytes) are kept as %s; "
                       "the %d byte(s) of the fetch being written when it died are dropped (never "
                       "acknowledged, so fetched again)", open_path, fetches, keep, salvaged.name, size - keep)
    else:
        logger.warning("%s was left open by a killed crawl and held no whole fetch (%d bytes); removed",
                       open_path, size)
    return result


def read_fetches(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(urls, response record ids) of a complete WARC file, in file order."""
    urls, ids = [], []
    with open(path, "rb") as stream:
        for rec in ArchiveIterator(stream):
            if rec.rec_type in ("response", "revisit"):  # each is one fetch to acknowledge
                urls.append(rec.rec_headers.get_header("WARC-Target-URI"))
                ids.append(rec.rec_headers.get_header("WARC-Record-ID"))
    return tuple(urls), tuple(ids)


def _complete_members(stream: BinaryIO) -> tuple[list[int], str]:
    """File offsets where each complete gzip member ends, and how the bytes after the last one end:
    "end" (nothing after it), "partial" (a member cut short: a kill) or "error" (not gzip from there on)."""
    ends: list[int] = []
    offset = 0        # file offset of data[0]
    in_member = False  # the current member has consumed bytes
    inflater = zlib.decompressobj(wbits=31)
    data = b""
    while True:
        if not data:
            data = stream.read(_CHUNK)
            if not data:
                return ends, "partial" if in_member else "end"
        try:
            pending = data
            while True:  # bounded output: one record can inflate to many times its size
                inflater.decompress(pending, _CHUNK)
                if inflater.eof or not inflater.unconsumed_tail:
                    break
                pending = inflater.unconsumed_tail
        except zlib.error:
            return ends, "error"  # also a bad CRC: a member that is whole but wrong is not kept
        if inflater.eof:
            offset += len(data) - len(inflater.unused_data)
            ends.append(offset)
            data = inflater.unused_data
            inflater = zlib.decompressobj(wbits=31)
            in_member = False
        else:
            offset += len(data)
            data = b""
            in_member = True


def _whole_fetches(stream: BinaryIO, whole_end: int, member_ends: set[int]) -> tuple[int, int]:
    """(bytes to keep, fetches in them): up to the end of the last request record among whole members, or of a lone
    metadata record (one that accompanies no fetch) after it."""
    starts: list[tuple[int, str | None]] = []
    records = ArchiveIterator(LimitReader(stream, whole_end))
    try:
        for rec in records:
            lone = rec.rec_type == "metadata" and not rec.rec_headers.get_header("WARC-Concurrent-To")
            starts.append((records.get_record_offset(), "lone" if lone else rec.rec_type))
    except ArchiveLoadFailed as exc:  # a whole gzip member that is not a WARC record: keep what came before
        logger.warning("stopped reading records at an unreadable one: %s", exc)
    starts.append((whole_end, None))
    keep = fetches = responses = 0
    for (_, kind), (next_start, _) in zip(starts, starts[1:]):
        if next_start not in member_ends:
            break  # records and gzip members disagree: keep only what came before
        if kind in ("response", "revisit"):
            responses += 1
        elif kind == "request" and responses > fetches:  # the writer puts a fetch's request after its response
            fetches, keep = responses, next_start
        elif kind == "lone" and responses == fetches:  # a NotFetched record, between two fetches
            keep = next_start
    return keep, fetches


def _cut_then_zeros(stream: BinaryIO, start: int) -> bool:
    """After the last whole member: a member cut short (or nothing), then only zeros, as a power loss
    leaves it.  Whether zlib already failed on the zeros depends on where the cut fell, so the zeros are
    stripped and what is left must be a clean start of a gzip member."""
    stream.seek(start)
    rest = stream.read().rstrip(b"\0")  # at most one record plus the zeros
    if not rest:
        return True
    inflater = zlib.decompressobj(wbits=31)
    try:
        while rest:
            inflater.decompress(rest, _CHUNK)
            rest = inflater.unconsumed_tail
    except zlib.error:
        return False
    return not inflater.eof  # a whole member here would have been counted: a cut one is a plain cut


def _copy_prefix(source: Path, target: Path, length: int) -> None:
    tmp = target.with_name(target.name + ".part")
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(LimitReader(src, length), dst)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, target)
