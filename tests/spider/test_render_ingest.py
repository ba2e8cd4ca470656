"""The rendered DOM's way from the crawl's WARC into bronze: a conversion record, read back by ingest's executors.

Written by the crawl's own writer (spider/warc.py), read by ingest's executor function (jobs/ingest.read_files)
on Arrow batches, as Spark's mapInArrow calls it: no Spark session needed for this seam.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser

from jobs.config import load_jobs_config
from jobs.ingest import HTML_SOURCE, read_files, read_schema
from spider.render.warc_record import RenderedDom
from spider.warc import Fetch, RotatingWarcWriter, warc_date

SHELL = b'<html><body><div id="root"></div><script src="/app.js"></script></body></html>'
DOM = '<html><body><div id="root"><p>Text that only JavaScript writes, r\u00e9sum\u00e9.</p></div></body></html>'.encode()


def fetch(url: str, body: bytes, record_id: str) -> Fetch:
    return Fetch(url, StatusAndHeaders("GET / HTTP/1.1", [("Host", "x.test")], protocol="", is_http_request=True), b"",
                 StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1"), body,
                 record_id=record_id)


def ingest_rows(path) -> list[dict]:
    schema = to_arrow_schema(read_schema(), timezone="UTC")
    batch = pa.RecordBatch.from_pylist([{"file": str(path), "size": path.stat().st_size}])
    return [row for out in read_files([batch], load_jobs_config().ingest, schema) for row in out.to_pylist()]


def test_ingest_extracts_from_the_rendered_dom_and_says_so_while_other_pages_keep_their_html(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {"operator": "test"})
    rendered_id, plain_id = StatusAndHeadersParser.make_warc_id(), StatusAndHeadersParser.make_warc_id()
    writer.write(fetch("http://spa.test/", SHELL, rendered_id))
    writer.write(fetch("http://plain.test/", b"<html><body><p>plain</p></body></html>", plain_id))
    writer.write_rendered(RenderedDom("http://spa.test/", rendered_id, DOM, warc_date(), {"Ms": "120"}))
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
