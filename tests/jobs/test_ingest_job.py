"""jobs.ingest on real local Spark + Delta: WARC files -> bronze.pages, idempotent."""
import json

from deltalake import DeltaTable
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders

from conftest import PAGES, Page, write_warc
from jobs.ingest import IngestJob
from jobs.warc.records import TRUNCATED
from spider.warc import Fetch, NotFetched, RotatingWarcWriter

WARC_FILES = ["file", "size", "modified", "records_seen", "rows", "skips", "status", "error", "reader",
              "ingested_at", "run_id"]
BRONZE = ["doc_id", "url", "host", "fetch_time", "status", "content_type", "headers", "html", "charset",
          "payload_digest", "warc_file", "warc_offset", "warc_record_id"]


def bronze_rows(pipeline):
    table = DeltaTable(str(pipeline.lake / "bronze" / "pages"))
    return table, table.to_pyarrow_table().sort_by("doc_id").to_pylist()


def test_bronze_holds_every_good_response_with_seams_columns(pipeline, crawl):
    table, rows = bronze_rows(pipeline)
    assert [f.name for f in table.schema().fields] == BRONZE
    assert sorted(r["warc_record_id"] for r in rows) == sorted(crawl.good_ids + crawl.cut_ids_kept)
    assert len(rows) == len(PAGES) + 2
    sea = next(r for r in rows if r["url"] == "http://otters.weblm.test/sea")
    assert sea["html"] == PAGES[1].body and dict(sea["headers"])["content-encoding"] == "gzip"
    assert sea["host"] == "otters.weblm.test" and sea["status"] == 200 and sea["fetch_time"] is not None


def test_offsets_reread_the_same_records(pipeline):
    _, rows = bronze_rows(pipeline)
    for row in rows:
        with open(row["warc_file"], "rb") as stream:
            stream.seek(row["warc_offset"])
            record = next(iter(ArchiveIterator(stream)))
            assert record.rec_headers.get_header("WARC-Record-ID") == row["warc_record_id"]
            assert record.content_stream().read() == row["html"]


def test_cut_file_is_counted_and_logged(pipeline, crawl):
    metrics = json.loads((pipeline.lake / "_metrics" / "ingest.json").read_text())
    assert metrics["warc_files"] == 2  # the .open file is not read
    assert metrics["files_by_status"] == {"ok": 1, "partial": 1, "failed": 0}
    assert metrics["output_rows"] == len(PAGES) + 2
    assert metrics["skipped"]["truncated_record"] == 1
    example = next(e for e in metrics["skipped_examples"] if e["skip_reason"] == "truncated_record")
    assert example["warc_file"] == str(crawl.cut_file) and example["warc_offset"] > 0
    assert metrics["input_rows"] == sum(metrics["skipped"].values()) + metrics["pages_read"]


def test_warc_files_table_accounts_for_every_record(pipeline, crawl):
    table = DeltaTable(str(pipeline.lake / "bronze" / "warc_files"))
    assert [f.name for f in table.schema().fields] == WARC_FILES
    files = {r["file"]: r for r in table.to_pyarrow_table().to_pylist()}
    assert set(files) == {str(crawl.good_file), str(crawl.cut_file)}
    good, cut = files[str(crawl.good_file)], files[str(crawl.cut_file)]
    assert good["status"] == "ok" and good["error"] is None and good["rows"] == len(PAGES)
    assert good["size"] == crawl.good_file.stat().st_size and good["modified"] is not None
    assert cut["status"] == "partial" and "truncated_record" in cut["error"] and cut["rows"] == 2
    for row in files.values():
        assert row["records_seen"] == row["rows"] + sum(n for _, n in row["skips"])
        assert row["reader"] == "fastwarc" and row["run_id"] and row["ingested_at"] is not None


def test_rerun_adds_nothing_and_keeps_the_version(pipeline, crawl):
    table, before = bronze_rows(pipeline)
    version = table.version()
    files_version = DeltaTable(str(pipeline.lake / "bronze" / "warc_files")).version()
    metrics = IngestJob().run(pipeline.args("-p", f"warc_dir={crawl.warc_dir}"))
    table, after = bronze_rows(pipeline)
    assert metrics.output_rows == 0 and table.version() == version and after == before
    # the partial file is read again, reads the same way, and so changes no row of bronze.warc_files
    assert metrics.extra["files_to_read"] == 1 and metrics.extra["files_already_ingested"] == 1
    assert DeltaTable(str(pipeline.lake / "bronze" / "warc_files")).version() == files_version


def test_pages_the_crawler_cut_are_kept_marked_and_counted_by_reason(spark, tmp_path, caplog):
    warc = tmp_path / "warc"
    warc.mkdir()
    write_warc(warc / "cut.warc.gz", [Page("http://big.weblm.test/", 200, "text/html", PAGES[0].body[:900],
                                           truncated="length"), PAGES[0]])
    metrics = IngestJob().run(["--lake", str(tmp_path / "lake"), "-p", f"warc_dir={warc}"])
    assert metrics.output_rows == 2 and metrics.extra["pages_truncated"] == {"length": 1}
    rows = DeltaTable(str(tmp_path / "lake" / "bronze" / "pages")).to_pyarrow_table(columns=["url", "headers"])
    marks = {row["url"]: dict(row["headers"]).get(TRUNCATED) for row in rows.to_pylist()}
    assert marks == {"http://big.weblm.test/": "length", PAGES[0].url: None}
    assert "1 page(s) whose WARC record says the crawler cut the body (WARC-Truncated: length 1)" in caplog.text


def test_urls_the_crawl_did_not_fetch_are_kept_in_bronze_unfetched_with_their_reason(spark, tmp_path):
    writer = RotatingWarcWriter(tmp_path / "warc", "t", 10**9, {"operator": "test"})
    writer.write(Fetch(PAGES[0].url, StatusAndHeaders("GET / HTTP/1.1", [("Host", "x")], protocol="",
                                                      is_http_request=True), b"",
                       StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1"),
                       PAGES[0].body, metadata={"depth": "0"}))
    writer.write_not_fetched(NotFetched("http://shy.weblm.test/private/a", "robots_denied", "robots.txt disallows it"))
    writer.write_not_fetched(NotFetched("http://gone.weblm.test/", "dns", "no address for gone.weblm.test"))
    writer.close()
    args = ["--lake", str(tmp_path / "lake"), "-p", f"warc_dir={tmp_path / 'warc'}"]
    metrics = IngestJob().run(args)
    assert metrics.output_rows == 1 and metrics.extra["unfetched_inserted"] == 2
    assert metrics.extra["unfetched_by_reason"] == {"dns": 1, "robots_denied": 1}
    table = DeltaTable(str(tmp_path / "lake" / "bronze" / "unfetched"))
    rows = {r["url"]: r for r in table.to_pyarrow_table().to_pylist()}
    shy = rows["http://shy.weblm.test/private/a"]
    assert (shy["host"], shy["reason"], shy["detail"]) == ("shy.weblm.test", "robots_denied", "robots.txt disallows it")
    assert shy["time"] is not None and shy["warc_offset"] > 0 and shy["warc_file"].endswith(".warc.gz")
    assert rows["http://gone.weblm.test/"]["reason"] == "dns"
    # each record accounted for: the fetch's metadata record is routine, these two are `not_fetched` skips
    (files,) = DeltaTable(str(tmp_path / "lake" / "bronze" / "warc_files")).to_pyarrow_table().to_pylist()
    skips = dict(files["skips"])
    assert skips["not_fetched"] == 2 and files["records_seen"] == files["rows"] + sum(skips.values())
    version = table.version()
    IngestJob().run([*args, "--full"])   # read again: nothing new
    assert DeltaTable(str(tmp_path / "lake" / "bronze" / "unfetched")).version() == version
