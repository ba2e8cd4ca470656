"""The rendered DOM's way from the crawl's WARC into bronze: a conversion record, read back by ingest's executors.

Written by the crawl's own writer (spider/warc.py), read by ingest's executor function (jobs/ingest.read_files)
on Arrow batches, as Spark's mapInArrow calls it: no Spark session needed for this seam.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from warcio.statusandheaders import StatusAndHeaders

from jobs.config import load_jobs_config
from jobs.ingest import HTML_SOURCE, read_files, read_schema
from spider.render.warc_record import RenderedDom
from spider.warc import Fetch, RotatingWarcWriter

SHELL = b'<html><body><div id="root"></div><script src="/app.js"></script></body></html>'
DOM = '<html><body><div id="root"><p>Text that only JavaScript writes, r\u00e9sum\u00e9.</p></div></body></html>'.encode()


def fetch(url: str, body: bytes, rendered: RenderedDom | None = None) -> Fetch:
    return Fetch(url, StatusAndHeaders("GET / HTTP/1.1", [("Host", "x.test")], protocol="", is_http_request=True), b"",
                 StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1"), body,
                 rendered=rendered)


def ingest_rows(path) -> list[dict]:
    schema = to_arrow_schema(read_schema(), timezone="UTC")
    batch = pa.RecordBatch.from_pylist([{"file": str(path), "size": path.stat().st_size}])
    return [row for out in read_files([batch], load_jobs_config().ingest, schema) for row in out.to_pylist()]


def test_ingest_extracts_from_the_rendered_dom_and_says_so_while_other_pages_keep_their_html(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {"operator": "test"})
    rendered_id = writer.write(fetch("http://spa.test/", SHELL, RenderedDom(DOM, {"Ms": "120"}))).record_id
    writer.write(fetch("http://plain.test/", b"<html><body><p>plain</p></body></html>"))
    writer.close()
    assert writer.counters.conversions == 1
    rows = {r["url"]: r for r in ingest_rows(writer.closed_files[0]) if r["kind"] == "page"}
    spa, plain = rows["http://spa.test/"], rows["http://plain.test/"]
    assert spa["html"] == DOM and spa["charset"] == "utf-8"
    assert dict(spa["headers"])[HTML_SOURCE].startswith("rendered <urn:uuid:")
    assert spa["warc_record_id"] == rendered_id             # lineage still points at the response record
    assert plain["html"].startswith(b"<html><body><p>plain") and HTML_SOURCE not in dict(plain["headers"])
    summary = next(r for r in ingest_rows(writer.closed_files[0]) if r["kind"] == "file")
    assert summary["rows"] == 2 and dict(summary["skips"]).get("other_record_type") == 4  # warcinfo, 2 requests, the conversion


def test_the_conversion_record_sits_inside_its_fetch_before_the_request_and_names_the_response(tmp_path):
    from warcio.archiveiterator import ArchiveIterator

    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {"operator": "test"})
    record_id = writer.write(fetch("http://spa.test/", SHELL, RenderedDom(DOM, {"Ms": "120", "Subrequests": "2"})),
                             ).record_id
    writer.close()
    with open(writer.closed_files[0], "rb") as stream:
        records = [(r.rec_type, r.rec_headers, r.content_stream().read()) for r in ArchiveIterator(stream)]
    assert [t for t, _, _ in records] == ["warcinfo", "response", "conversion", "request"]
    _, headers, block = records[2]
    assert headers.get_header("WARC-Refers-To") == record_id and block == DOM
    assert headers.get_header("WARC-X-Render-Subrequests") == "2"
    assert headers.get_header("Content-Type") == "text/html; charset=utf-8"
