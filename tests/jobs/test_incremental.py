"""Incremental runs: each job processes only what is new since its last successful run; a run with
nothing new changes no table and writes no file; `--full` reprocesses everything."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from conftest import PAGES, Page, article, write_warc
from jobs.export import ExportJob
from jobs.extract import ExtractJob
from jobs.ingest import IngestJob
from jobs.tokens import TokenizeJob

TABLES = ("bronze/pages", "silver/documents", "gold/tokens")


class Run:
    def __init__(self, root: Path) -> None:
        self.root, self.warc = root, root / "warc"
        self.warc.mkdir(parents=True)

    def args(self, *extra: str) -> list[str]:
        return ["-p", f"var={self.root}", "-o", "tokenize.vocab_size=400",
                "-o", "tokenize.input_table=silver.documents",  # extract -> tokenize directly: incrementality of these four
                "-o", "export.target_tokens_per_shard=400", *extra]

    def all_stages(self, *extra: str) -> dict:
        return {job.name: job.run(self.args(*extra)) for job in (IngestJob(), ExtractJob(), TokenizeJob(), ExportJob())}

    def versions(self) -> dict:
        return {t: DeltaTable(str(self.root / "lake" / t)).version() for t in TABLES}

    def manifest(self) -> Path:
        return self.root / "shards" / "manifest.json"


def more_pages(prefix: str, n: int) -> list[Page]:
    return [Page(f"http://{prefix}.weblm.test/{i}", 200, "text/html; charset=utf-8",
                 article(f"{prefix.title()} story {i}", f"{prefix} {i}").encode()) for i in range(n)]


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory) -> Run:
    run = Run(tmp_path_factory.mktemp("incremental"))
    write_warc(run.warc / "crawl-1.warc.gz", PAGES)
    run.first = run.all_stages()
    return run


def test_a_run_with_nothing_new_changes_no_table_and_no_file(run):
    before, manifest_stat = run.versions(), run.manifest().stat()
    again = run.all_stages()
    assert run.versions() == before
    assert again["extract"].input_rows == 0 and again["tokenize"].input_rows == 0
    assert again["export"].input_rows == 0
    assert run.manifest().stat().st_mtime_ns == manifest_stat.st_mtime_ns  # not even rewritten
    assert all(m.status == "ok" for m in again.values())


def test_new_warc_is_processed_alone_and_the_shards_follow(run):
    before = run.versions()
    silver_before = DeltaTable(str(run.root / "lake" / "silver" / "documents")).to_pyarrow_table().num_rows
    write_warc(run.warc / "crawl-2.warc.gz", more_pages("newts", 3))
    second = run.all_stages()
    assert second["extract"].input_rows == 3  # only the new pages went through extraction
    assert second["tokenize"].input_rows == 3
    assert second["tokenize"].extra["tokenizer_sha256"] == run.first["tokenize"].extra["tokenizer_sha256"]
    after = run.versions()
    assert all(after[t] == before[t] + 1 for t in TABLES)
    silver = DeltaTable(str(run.root / "lake" / "silver" / "documents")).to_pyarrow_table()
    assert silver.num_rows == silver_before + 3
    manifest = json.loads(run.manifest().read_text())
    assert manifest["sources"]["gold.tokens"]["version"] == after["gold/tokens"]
    assert manifest["totals"]["documents"] == silver.num_rows


def test_changed_settings_reprocess_what_they_change(run):
    """A stricter extract.min_chars re-extracts every page (outputs made under other settings are stale) and
    removes from silver, then gold, the documents it now drops."""
    silver_before = DeltaTable(str(run.root / "lake" / "silver" / "documents")).to_pyarrow_table().num_rows
    strict = run.all_stages("-o", "extract.min_chars=1000")
    assert strict["extract"].input_rows == 10  # 7 + 3 bronze rows, all of them again
    silver = DeltaTable(str(run.root / "lake" / "silver" / "documents")).to_pyarrow_table()
    gold = DeltaTable(str(run.root / "lake" / "gold" / "tokens")).to_pyarrow_table()
    assert 0 < silver.num_rows < silver_before
    assert sorted(gold.column("doc_id").to_pylist()) == sorted(silver.column("doc_id").to_pylist())
    assert strict["tokenize"].extra["rows_deleted"] == silver_before - silver.num_rows
    # the same settings again: nothing to do
    again = run.all_stages("-o", "extract.min_chars=1000")
    assert again["extract"].input_rows == 0 and again["tokenize"].input_rows == 0


def test_full_reprocesses_everything_and_leaves_equal_tables_alone(run):
    """`--full` re-reads every input and retrains the tokenizer on today's silver; when that changes
    nothing, no table gets a new version."""
    run.all_stages("--full", "-o", "extract.min_chars=1000")  # the tokenizer now fits the smaller silver
    before = run.versions()
    full = run.all_stages("--full", "-o", "extract.min_chars=1000")
    assert full["extract"].input_rows == 10 and full["extract"].extra["mode"] == "full"
    assert full["tokenize"].input_rows == full["extract"].output_rows
    assert run.versions() == before
