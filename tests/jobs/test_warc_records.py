"""WARC -> bronze rows without Spark: pages, offsets, and broken input counted, never raised."""
from collections import Counter

from warcio.archiveiterator import ArchiveIterator

from conftest import PAGES, shared_warc
from jobs.warc.records import doc_id_for, read_warc


def test_every_response_becomes_a_page_with_its_payload(crawl):
    rows = list(read_warc(str(crawl.good_file)))
    pages = [r for r in rows if r["skip_reason"] is None]
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
    pages = [r for r in read_warc(str(crawl.good_file)) if r["skip_reason"] is None]
    with open(crawl.good_file, "rb") as stream:
        for page in pages:
            stream.seek(page["warc_offset"])
            record = next(iter(ArchiveIterator(stream)))
            assert record.rec_headers.get_header("WARC-Record-ID") == page["warc_record_id"]
            assert record.rec_headers.get_header("WARC-Target-URI") == page["url"]


def test_cut_file_keeps_the_records_before_the_cut(crawl):
    rows = list(read_warc(str(crawl.cut_file)))
    pages = [r for r in rows if r["skip_reason"] is None]
    assert [p["warc_record_id"] for p in pages] == crawl.cut_ids_kept
    problems = [r for r in rows if r["skip_reason"] not in (None, "other_record_type")]
    assert len(problems) == 1 and problems[0]["skip_reason"] in ("truncated_record", "truncated_file")
    assert problems[0]["warc_file"] == str(crawl.cut_file) and problems[0]["warc_offset"] > pages[-1]["warc_offset"]


def test_not_a_warc_is_a_counted_skip(tmp_path):
    junk = tmp_path / "junk.warc.gz"
    junk.write_bytes(b"<html>this is not a WARC file</html>\n" * 10)
    (row,) = read_warc(str(junk))
    assert row["skip_reason"] == "not_warc" and row["warc_file"] == str(junk)
    missing = list(read_warc(str(tmp_path / "gone.warc.gz")))
    assert [r["skip_reason"] for r in missing] == ["truncated_file"]


def test_shared_broken_files_are_counted_not_raised():
    clipped = Counter(r["skip_reason"] for r in read_warc(shared_warc("resiliparse/clipped.warc.gz")))
    assert clipped == {"truncated_record": 1}
    cut = Counter(r["skip_reason"] for r in read_warc(shared_warc("solrwayback/transfer_compression_none_truncated.warc.gz")))
    assert cut["truncated_record"] == 1 and cut[None] == 0
    single_gzip = Counter(r["skip_reason"] for r in read_warc(shared_warc("warcio/example-bad-non-chunked.warc.gz")))
    assert single_gzip["malformed_record"] == 1
    iana = Counter(r["skip_reason"] or "page" for r in read_warc(shared_warc("pywb/warcs/iana.warc.gz")))
    assert iana["page"] == 48 and set(iana) == {"page", "other_record_type"}


def test_brotli_payloads_are_decoded():
    (page,) = [r for r in read_warc(shared_warc("solrwayback/transfer_compression_brotli.warc.gz"))
               if r["skip_reason"] is None]
    assert page["headers"]["content-encoding"] == "br"
    assert page["html"].lstrip().startswith(b"<html>") and b"<title>Simple page</title>" in page["html"]
