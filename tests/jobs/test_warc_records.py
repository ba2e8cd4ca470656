"""WARC/ARC -> bronze rows without Spark: pages, offsets, and every record accounted for, never raised."""
import gzip
import random
from collections import Counter
from pathlib import Path

import pytest
from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from warcio.archiveiterator import ArchiveIterator

from conftest import PAGES, SHARED_WARC, Page, shared_warc, write_warc
from jobs.config import load_jobs_config
from jobs.warc.files import read_warc
from jobs.warc.records import TRUNCATED, doc_id_for

CFG = load_jobs_config().ingest


def read(path) -> tuple[list[dict], dict]:
    """The record rows and the file's summary, checking that the summary counts exactly the rows."""
    *rows, summary = read_warc(str(path), CFG)
    assert summary["kind"] == "file" and all(r["kind"] in ("page", "skip") for r in rows)
    assert summary["rows"] == sum(r["kind"] == "page" for r in rows)
    assert summary["skips"] == dict(Counter(r["skip_reason"] for r in rows if r["kind"] == "skip"))
    assert summary["records_seen"] == summary["rows"] + sum(summary["skips"].values())
    return rows, summary


def pages_of(rows):
    return [r for r in rows if r["kind"] == "page"]


def test_every_response_becomes_a_page_with_its_payload(crawl):
    rows, summary = read(crawl.good_file)
    pages = pages_of(rows)
    assert summary["status"] == "ok" and summary["error"] is None and summary["records_seen"] == 1 + 2 * len(PAGES)
    assert [p["warc_record_id"] for p in pages] == crawl.good_ids
    assert [p["url"] for p in pages] == [p.url for p in PAGES]
    assert Counter(r["skip_detail"] for r in rows if r["skip_reason"]) == {"warcinfo": 1, "request": len(PAGES)}
    by_url = {p["url"]: p for p in pages}
    # Content-Encoding: gzip is undone; the payload is what the server meant
    assert by_url["http://otters.weblm.test/sea"]["html"] == PAGES[1].body
    assert by_url["http://otters.weblm.test/rivers"]["charset"] == "utf-8"
    assert by_url["http://otters.weblm.test/rivers"]["content_type"] == "text/html"
    assert by_url["http://otters.weblm.test/missing"]["status"] == 404
    assert by_url["http://cafe.weblm.test/"]["charset"] is None
    assert all(p["doc_id"] == doc_id_for(p["warc_record_id"]) and len(p["doc_id"]) == 40 for p in pages)


def test_offsets_point_at_the_records(crawl):
    pages = pages_of(read(crawl.good_file)[0])
    with open(crawl.good_file, "rb") as stream:
        for page in pages:
            stream.seek(page["warc_offset"])
            record = next(iter(ArchiveIterator(stream)))
            assert record.rec_headers.get_header("WARC-Record-ID") == page["warc_record_id"]
            assert record.rec_headers.get_header("WARC-Target-URI") == page["url"]


def test_cut_file_keeps_the_records_before_the_cut(crawl):
    rows, summary = read(crawl.cut_file)
    pages = pages_of(rows)
    assert [p["warc_record_id"] for p in pages] == crawl.cut_ids_kept
    problems = [r for r in rows if r["skip_reason"] not in (None, "other_record_type")]
    assert len(problems) == 1 and problems[0]["skip_reason"] == "truncated_record"
    assert problems[0]["warc_file"] == str(crawl.cut_file) and problems[0]["warc_offset"] > pages[-1]["warc_offset"]
    assert summary["status"] == "partial" and "truncated_record" in summary["error"]


# -- every cut of a record is accounted for ------------------------------------------------------------------
def _last_record(path: Path) -> tuple[bytes, int]:
    data = path.read_bytes()
    *_, last = (r.stream_pos for r in FastArchiveIterator(str(path)))
    return data, last


def _check_every_cut(data: bytes, start: int, cuts, tmp_path: Path, name: str) -> Counter:
    """Cut `data` at each offset; each cut reads without raising and accounts for every record."""
    cut_file = tmp_path / name
    outcomes = Counter()
    for cut in cuts:
        cut_file.write_bytes(data[:cut])
        rows, summary = read(cut_file)  # asserts records_seen == rows + skips
        before_last = cut == start
        assert summary["records_seen"] == (4 if before_last else 5), cut
        assert summary["status"] in ("ok", "partial"), (cut, summary)
        if summary["status"] == "ok":  # ok only when the last record is whole: then it is a page
            assert len(pages_of(rows)) == (1 if before_last else 2), cut
        outcomes[tuple(sorted(summary["skips"]))] += 1
    return outcomes


def test_gzip_record_cut_at_every_byte_is_a_skip_never_an_exception(tmp_path):
    whole = tmp_path / "whole.warc.gz"
    write_warc(whole, PAGES[:2])
    data, start = _last_record(whole)
    outcomes = _check_every_cut(data, start, range(start, len(data) + 1), tmp_path, "cut.warc.gz")
    # the cuts fall into headers (malformed), body (truncated), the member's first bytes (unread_bytes)
    damage = {reason for skips in outcomes for reason in skips} - {"other_record_type"}
    assert damage == {"malformed_record", "truncated_record", "unread_bytes"}


def test_plain_record_cut_at_every_byte_is_a_skip_never_an_exception(tmp_path):
    whole = tmp_path / "whole.warc.gz"
    write_warc(whole, PAGES[:2])
    plain = tmp_path / "whole.warc"
    plain.write_bytes(gzip.decompress(whole.read_bytes()))
    data, start = _last_record(plain)
    outcomes = _check_every_cut(data, start, range(start, len(data) + 1), tmp_path, "cut.warc")
    assert {reason for skips in outcomes for reason in skips} >= {"malformed_record", "truncated_record"}


def test_lz4_and_arc_files_cut_anywhere_are_accounted_for(tmp_path):
    for relative, step in (("resiliparse/warcfile.warc.lz4", 97), ("warcio/example.arc.gz", 1), ("warcio/example.arc", 3)):
        data = Path(shared_warc(relative)).read_bytes()
        cut_file = tmp_path / Path(relative).name
        for cut in range(0, len(data) + 1, step):
            cut_file.write_bytes(data[:cut])
            _, summary = read(cut_file)
            assert summary["status"] in ("ok", "partial", "failed"), (relative, cut)


# -- files that are not WARC at all ---------------------------------------------------------------------
def test_garbage_empty_and_non_warc_files_fail_with_a_reason(tmp_path):
    cases = {
        "garbage.warc.gz": random.Random(7).randbytes(4000),
        "html.warc.gz": gzip.compress(b"<html>this is not a WARC file</html>\n" * 10),
        "html.warc": b"<html>this is not a WARC file</html>\n" * 10,
        "text.arc": b"just some text\n" * 10,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        rows, summary = read(tmp_path / name)
        assert summary["status"] == "failed" and summary["records_seen"] == 1, name
        assert [r["skip_reason"] for r in rows] == ["not_warc"] and "WARC" in rows[0]["skip_detail"]
    (tmp_path / "empty.warc.gz").write_bytes(b"")
    rows, summary = read(tmp_path / "empty.warc.gz")
    assert rows == [] and summary["status"] == "failed" and "empty" in summary["error"]
    (tmp_path / "five.warc.gz").write_bytes(gzip.compress(b"WARC/1.1\r\n")[:5])  # cut inside the gzip header
    rows, summary = read(tmp_path / "five.warc.gz")
    assert summary["status"] == "failed" and [r["skip_reason"] for r in rows] == ["unread_bytes"]
    rows, summary = read(tmp_path / "gone.warc.gz")
    assert rows == [] and summary["status"] == "failed" and summary["error"].startswith("cannot open")


# -- the shared corpus: every variant read, every file accounted for --------------------------------------
SHARED_FILES = sorted(str(p.relative_to(SHARED_WARC)) for p in SHARED_WARC.rglob("*")
                      if p.name.endswith((".warc", ".warc.gz", ".warc.lz4", ".arc", ".arc.gz", ".bad"))) \
    if SHARED_WARC.is_dir() else []


@pytest.mark.skipif(not SHARED_FILES, reason=f"shared test data {SHARED_WARC} is absent")
@pytest.mark.parametrize("relative", SHARED_FILES)
def test_every_shared_file_is_accounted_for(relative):
    _, summary = read(shared_warc(relative))
    assert summary["records_seen"] > 0


def test_shared_broken_files_are_counted_not_raised():
    _, clipped = read(shared_warc("resiliparse/clipped.warc.gz"))
    assert clipped["skips"] == {"truncated_record": 1} and clipped["status"] == "partial"
    rows, cut = read(shared_warc("solrwayback/transfer_compression_none_truncated.warc.gz"))
    assert cut["skips"]["truncated_record"] == 1 and cut["rows"] == 0
    # one gzip stream for the whole file: warcio refuses it, FastWARC reads it
    _, single_gzip = read(shared_warc("warcio/example-bad-non-chunked.warc.gz"))
    assert single_gzip["status"] == "ok" and single_gzip["rows"] == 1
    # a wrong Content-Length: the records before it are pages, the rest is counted
    _, bad_length = read(shared_warc("pywb/warcs/example.warc"))
    assert bad_length["status"] == "partial" and bad_length["skips"]["malformed_record"] == 1
    _, iana = read(shared_warc("pywb/warcs/iana.warc.gz"))
    assert iana["rows"] == 48 and set(iana["skips"]) == {"other_record_type"} and iana["status"] == "ok"


def test_gz_plain_and_lz4_variants_give_the_same_pages():
    variants = [pages_of(read(shared_warc(f"resiliparse/warcfile.{ext}"))[0]) for ext in ("warc.gz", "warc", "warc.lz4")]
    keyed = [[(p["doc_id"], p["url"], p["status"], p["html"]) for p in pages] for pages in variants]
    assert len(keyed[0]) == 16 and keyed[0] == keyed[1] == keyed[2]


def test_arc_files_are_read_with_stable_record_ids():
    first = pages_of(read(shared_warc("ukwa/small-arcs-and-warcs/IAH-20080430204825-00000-blackbook-truncated.arc"))[0])
    again = pages_of(read(shared_warc("ukwa/small-arcs-and-warcs/IAH-20080430204825-00000-blackbook-truncated.arc.gz"))[0])
    assert len(first) == 7 and [p["doc_id"] for p in first] == [p["doc_id"] for p in again]
    assert [p["html"] for p in first] == [p["html"] for p in again]
    assert all(p["fetch_time"] is not None and p["url"].startswith("http") for p in first)


def test_brotli_payloads_are_decoded():
    (page,) = pages_of(read(shared_warc("solrwayback/transfer_compression_brotli.warc.gz"))[0])
    assert page["headers"]["content-encoding"] == "br"
    assert page["html"].lstrip().startswith(b"<html>") and b"<title>Simple page</title>" in page["html"]


def test_files_are_read_from_object_storage(bucket, crawl):
    import storage

    storage.put_file(crawl.good_file, f"{bucket}/warc/good.warc.gz")
    rows, summary = read(f"{bucket}/warc/good.warc.gz")
    assert summary["status"] == "ok" and [p["warc_record_id"] for p in pages_of(rows)] == crawl.good_ids
    assert all(r["warc_file"] == f"{bucket}/warc/good.warc.gz" for r in rows)


def test_a_payload_the_crawler_cut_is_kept_and_marked_with_the_reason(tmp_path):
    """WARC-Truncated (Common Crawl's `length` at 1 MiB, the spider's `disconnect`): the record itself is whole, so
    the page is kept, with the reason in its headers for every later stage to see."""
    path = tmp_path / "cut-by-crawler.warc.gz"
    body = PAGES[0].body
    write_warc(path, [Page("http://big.weblm.test/", 200, "text/html", body[: len(body) // 2], truncated="length"),
                      Page("http://lost.weblm.test/", 200, "text/html", body[:100], truncated="Disconnect"),
                      PAGES[0]])
    rows, summary = read(path)
    assert summary["status"] == "ok"
    marks = {p["url"]: p["headers"].get(TRUNCATED) for p in pages_of(rows)}
    assert marks == {"http://big.weblm.test/": "length", "http://lost.weblm.test/": "disconnect", PAGES[0].url: None}
