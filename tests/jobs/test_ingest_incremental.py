"""jobs.ingest run after run on real local Spark + Delta: only new or unfinished files are read, every file
is accounted for in bronze.warc_files, a run with nothing new commits nothing, --full re-reads idempotently."""
import logging
import random
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conftest import PAGES, Page, article, shared_warc, write_warc
from jobs.ingest import IngestJob


def more_pages(prefix: str, n: int) -> list[Page]:
    return [Page(f"http://{prefix}.weblm.test/{i}", 200, "text/html; charset=utf-8",
                 article(f"{prefix} {i}", f"{prefix} {i}").encode()) for i in range(n)]


class Lake:
    def __init__(self, root: Path) -> None:
        self.root, self.warc, self.lake = root, root / "warc", root / "lake"
        self.warc.mkdir(parents=True)

    def ingest(self, *extra: str):
        return IngestJob().run(["--lake", str(self.lake), "-p", f"warc_dir={self.warc}", *extra])

    def table(self, name: str) -> DeltaTable:
        return DeltaTable(str(self.lake / "bronze" / name))

    def versions(self) -> tuple[int, int]:
        return self.table("pages").version(), self.table("warc_files").version()

    def files(self) -> dict[str, dict]:
        return {Path(r["file"]).name: r for r in self.table("warc_files").to_pyarrow_table().to_pylist()}


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> Lake:
    """A folder with a good file, a file still cut short (its copy not finished) and a garbage file."""
    lake = Lake(tmp_path_factory.mktemp("ingest-incremental"))
    write_warc(lake.warc / "a.warc.gz", PAGES)
    write_warc(lake.root / "b-whole.warc.gz", more_pages("beavers", 3))
    whole = (lake.root / "b-whole.warc.gz").read_bytes()
    (lake.warc / "b.warc.gz").write_bytes(whole[: len(whole) - 200])
    (lake.warc / "c.warc.gz").write_bytes(random.Random(3).randbytes(3000))
    lake.first = lake.ingest()
    return lake


def test_a_failed_file_is_recorded_and_the_job_goes_on(lake):
    metrics = lake.first
    assert metrics.status == "ok" and metrics.extra["warc_files"] == 3
    assert metrics.extra["files_by_status"] == {"ok": 1, "partial": 1, "failed": 1}
    files = lake.files()
    assert {name: f["status"] for name, f in files.items()} == {"a.warc.gz": "ok", "b.warc.gz": "partial",
                                                                 "c.warc.gz": "failed"}
    assert "not_warc" in files["c.warc.gz"]["error"] and files["c.warc.gz"]["rows"] == 0
    for f in files.values():  # every record accounted for, the broken files included
        assert f["records_seen"] == f["rows"] + sum(n for _, n in f["skips"])
    assert metrics.input_rows == sum(f["records_seen"] for f in files.values())
    assert lake.table("pages").to_pyarrow_table().num_rows == len(PAGES) + 2


def test_unfinished_files_are_retried_and_a_rerun_that_reads_the_same_commits_nothing(lake):
    before = lake.versions()
    again = lake.ingest()
    assert again.extra["files_to_read"] == 2 and again.extra["files_already_ingested"] == 1
    assert lake.versions() == before


def test_fixed_files_are_read_again_and_their_rows_updated(lake):
    first = lake.files()
    (lake.warc / "b.warc.gz").write_bytes((lake.root / "b-whole.warc.gz").read_bytes())  # the copy finished
    write_warc(lake.warc / "c.warc.gz", more_pages("otters-again", 2))  # the garbage replaced by a real file
    metrics = lake.ingest()
    assert metrics.extra["files_to_read"] == 2 and metrics.extra["files_by_status"]["ok"] == 2
    assert metrics.output_rows == 1 + 2  # the beaver page after the old cut, and the two new pages
    files = lake.files()
    assert all(f["status"] == "ok" and f["error"] is None for f in files.values())
    assert files["a.warc.gz"]["run_id"] == first["a.warc.gz"]["run_id"]  # not read again
    assert files["b.warc.gz"]["run_id"] != first["b.warc.gz"]["run_id"] and files["b.warc.gz"]["rows"] == 3


def test_nothing_new_reads_nothing_and_full_rereads_without_duplicates(lake):
    before = lake.versions()
    idle = lake.ingest()
    assert idle.extra["files_to_read"] == 0 and lake.versions() == before
    full = lake.ingest("--full")
    assert full.extra["files_to_read"] == 3 and full.output_rows == 0
    pages = lake.table("pages").to_pyarrow_table()
    assert len(set(pages.column("doc_id").to_pylist())) == pages.num_rows == len(PAGES) + 5
    assert lake.versions() == before  # same pages, same outcomes: nothing to commit


def test_an_empty_folder_warns_and_writes_no_table(spark, tmp_path, caplog):
    empty = Lake(tmp_path)
    with caplog.at_level(logging.WARNING, logger="weblm.jobs.ingest"):
        metrics = empty.ingest()
    assert metrics.status == "ok" and metrics.extra["warc_files"] == 0
    assert any("no WARC files under" in r.getMessage() and "paths.warc_dir" in r.getMessage() for r in caplog.records)
    assert not (empty.lake / "bronze").exists()


def test_a_run_where_every_file_fails_fails(spark, tmp_path):
    broken = Lake(tmp_path)
    (broken.warc / "junk.warc.gz").write_bytes(b"<html>not a WARC</html>\n" * 20)
    with pytest.raises(RuntimeError, match="every one of the 1 WARC files failed"):
        broken.ingest()
    assert broken.files()["junk.warc.gz"]["status"] == "failed"  # recorded all the same, to retry


def test_every_variant_in_shared_data_is_ingested(spark, tmp_path):
    names = ["resiliparse/warcfile.warc.gz", "resiliparse/warcfile.warc", "resiliparse/warcfile.warc.lz4",
             "warcio/example.arc", "warcio/example.arc.gz", "resiliparse/clipped.warc.gz",
             "warcio/example-bad-non-chunked.warc.gz"]
    inputs = [shared_warc(n) for n in names]
    metrics = IngestJob().run(["--lake", str(tmp_path / "lake"), *inputs])
    assert metrics.extra["files_by_status"] == {"ok": 6, "partial": 1, "failed": 0}
    # the three encodings of one WARC file hold the same 16 records, the two ARC files the same page:
    # each kept once (the ARC page has the same stable id in both files), the copies counted
    assert metrics.skipped["duplicate_record_id"] == 2 * 16 + 1
    pages = DeltaTable(str(tmp_path / "lake" / "bronze" / "pages")).to_pyarrow_table()
    assert pages.num_rows == 16 + 1 + 1  # warcfile's pages, one ARC page (both ARC files hold it), non-chunked
    assert sum(f.endswith("example.arc") or f.endswith("example.arc.gz")
               for f in pages.column("warc_file").to_pylist()) == 1


def test_files_are_listed_in_object_storage(bucket, crawl):
    import storage
    from jobs.config import load_jobs_config
    from jobs.ingest import list_warc_files

    storage.put_file(crawl.good_file, f"{bucket}/warc/2025/a.warc.gz")
    storage.put_file(crawl.cut_file, f"{bucket}/warc/b.warc.gz")
    storage.write_bytes(f"{bucket}/warc/c.warc.gz.open", b"still being written")
    listed = list_warc_files([f"{bucket}/warc"], load_jobs_config().ingest.patterns)
    assert [f["file"] for f in listed] == [f"{bucket}/warc/2025/a.warc.gz", f"{bucket}/warc/b.warc.gz"]
    assert listed[0]["size"] == crawl.good_file.stat().st_size and listed[0]["modified"] is not None
