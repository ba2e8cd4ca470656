"""A lake table as a training corpus (`table:layer.name`): read with delta-rs, no Spark session.

The tables here are written with delta-rs too; tests/jobs/test_classifier_quality.py trains on a table that Spark
wrote, and the demo's kenlm and classifier stages read the crawl's silver.documents on local disk and on s3://."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

import storage
from conf.paths import load_paths
from jobs.quality.corpus import read_corpus

ENGLISH = ["The river otter hunts fish along the quiet banks of the stream every morning.",
           "A heron stands still in the shallow water and waits for frogs to swim past.",
           "Beavers cut down young trees and build their lodges from the bark and branches."]
GERMAN = ["Der Fischotter jagt jeden Morgen an den ruhigen Ufern des Baches nach Fischen.",
          "Ein Reiher steht still im flachen Wasser und wartet darauf, dass Frösche vorbeischwimmen.",
          "Biber fällen junge Bäume und bauen ihre Burgen aus der Rinde und den Ästen."]


def documents(n: int) -> dict[str, list]:
    """`n` documents, English and German in turn, each text unique; then one empty and one null text."""
    texts = [f"{(ENGLISH if i % 2 == 0 else GERMAN)[i % 3]} ({i})" for i in range(n)]
    return {"doc_id": [f"doc-{i:03d}" for i in range(n)] + ["empty", "null"],
            "text": texts + ["", None],
            "language": ["en" if i % 2 == 0 else "de" for i in range(n)] + ["en", "en"]}


def write_table(location: str, columns: dict[str, list], **options) -> None:
    write_deltalake(location, pa.table(columns), **options)


@pytest.fixture
def lake(tmp_path):
    paths = load_paths([f"lake={tmp_path / 'lake'}"])
    write_table(paths.table("silver.documents"), documents(40))
    return paths


def test_a_sample_is_the_seeded_order_cut_at_the_limit(lake):
    everything = read_corpus("table:silver.documents", paths=lake).texts
    assert len(everything) == 40 and len(set(everything)) == 40       # the empty and the null text left out
    sample = read_corpus("table:silver.documents", limit=10, seed=0, paths=lake).texts
    assert sample == everything[:10]                                  # a prefix of the whole table's seeded order
    assert read_corpus("table:silver.documents", limit=10, seed=0, paths=lake).texts == sample   # reproducible
    other = read_corpus("table:silver.documents", limit=10, seed=1, paths=lake).texts
    assert other != sample and set(other) <= set(everything)


def test_the_language_column_selects_documents(lake):
    german = read_corpus("table:silver.documents", language="de", paths=lake).texts
    assert len(german) == 20 and all(t.split(" (")[0] in GERMAN for t in german)
    assert read_corpus("table:silver.documents", language="de", limit=5, paths=lake).texts == german[:5]


@pytest.mark.parametrize("given", ["no column", "und", None])
def test_where_the_table_does_not_know_the_language_fasttext_decides(tmp_path, given, caplog):
    """silver.documents says `und` until the quality stage identifies the language; other tables may say nothing."""
    paths = load_paths([f"lake={tmp_path / 'lake'}"])
    columns = documents(12)
    if given == "no column":
        del columns["language"]
    else:
        columns["language"] = [given] * len(columns["text"])
    write_table(paths.table("silver.documents"), columns)
    corpus = read_corpus("table:silver.documents", language="en", paths=paths)
    assert sorted(t.split(" (")[0] for t in corpus.texts) == sorted(ENGLISH * 2)
    assert corpus.skipped["other_language"] == 6
    assert "corpus table:silver.documents: skipped {'other_language': 6}" in caplog.text   # said, not silent


def test_a_missing_table_says_what_to_run(tmp_path):
    paths = load_paths([f"lake={tmp_path / 'lake'}"])
    with pytest.raises(FileNotFoundError, match="silver/documents does not exist .*run the pipeline stage"):
        read_corpus("table:silver.documents", paths=paths)
    with pytest.raises(ValueError, match="needs the loaded paths"):
        read_corpus("table:silver.documents")


def test_a_table_on_object_storage(bucket, tmp_path):
    """The table's files in a bucket, as a Spark job leaves them there (written here locally, then copied up:
    fake-gcs-server does not take object_store's uploads, and no job writes with delta-rs)."""
    paths = load_paths([f"lake={bucket}/lake"])
    local = load_paths([f"lake={tmp_path / 'lake'}"])
    write_table(local.table("silver.documents"), documents(10))
    copied = storage.copy_tree(local.table("silver.documents"), paths.table("silver.documents"))
    assert any(name.endswith(".parquet") for name in copied) and any("_delta_log" in name for name in copied)
    texts = read_corpus("table:silver.documents", language="en", limit=3, paths=paths).texts
    assert len(texts) == 3 and all(t.split(" (")[0] in ENGLISH for t in texts)
    assert texts == read_corpus("table:silver.documents", language="en", limit=3, paths=local).texts


def test_delta_rs_on_a_gcs_endpoint_needs_no_credentials(monkeypatch, tmp_path):
    """object_store takes a GCS endpoint only inside a service-account key without OAuth: a credentialed custom
    endpoint is refused with the setting to change, never sent to Google's endpoint instead."""
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("storage:\n  gcs:\n    endpoint_url: http://127.0.0.1:1\n    anonymous: false\n")
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(overlay))
    storage.reset()
    try:
        with pytest.raises(ValueError, match="storage.gcs.anonymous: true"):
            storage.object_store_options("gs://lake/silver/documents")
        assert storage.object_store_options("/local/lake") == {}
    finally:
        storage.reset()
