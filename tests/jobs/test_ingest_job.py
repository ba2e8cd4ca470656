"""jobs.ingest on real local Spark + Delta: WARC files -> bronze.pages, idempotent."""
import json

from deltalake import DeltaTable
from warcio.archiveiterator import ArchiveIterator

from conftest import PAGES
from jobs.ingest import IngestJob

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
    assert metrics["output_rows"] == len(PAGES) + 2
    cut = [k for k in ("truncated_record", "truncated_file") if k in metrics["skipped"]]
    assert len(cut) == 1 and metrics["skipped"][cut[0]] == 1
    example = next(e for e in metrics["skipped_examples"] if e["skip_reason"] == cut[0])
    assert example["warc_file"] == str(crawl.cut_file) and example["warc_offset"] > 0
    assert metrics["input_rows"] == sum(metrics["skipped"].values()) + metrics["pages_read"]


def test_rerun_adds_nothing_and_keeps_the_version(pipeline, crawl):
    table, before = bronze_rows(pipeline)
    version = table.version()
    metrics = IngestJob().run(pipeline.args("-p", f"warc_dir={crawl.warc_dir}"))
    table, after = bronze_rows(pipeline)
    assert metrics.output_rows == 0 and table.version() == version and after == before
