"""jobs.extract on real Spark + Delta: bronze.pages -> silver.documents."""
import json

from deltalake import DeltaTable

from conftest import CP1252_TEXT, FOOTER

SILVER = ["doc_id", "url", "host", "fetch_time", "title", "text", "language", "n_chars", "warc_file", "warc_offset",
          "content_sha256"]


def test_silver_has_the_main_text_of_html_pages_only(pipeline):
    table = DeltaTable(str(pipeline.lake / "silver" / "documents"))
    assert [f.name for f in table.schema().fields] == SILVER
    docs = {r["url"]: r for r in table.to_pyarrow_table().to_pylist()}
    assert set(docs) == {"http://otters.weblm.test/rivers", "http://otters.weblm.test/sea", "http://cafe.weblm.test/",
                         "http://beavers.weblm.test/dams", "http://more.weblm.test/0", "http://more.weblm.test/1"}
    rivers = docs["http://otters.weblm.test/rivers"]
    assert rivers["title"] == "Otters of the river" and "Menu entry" not in rivers["text"]
    assert FOOTER not in rivers["text"] and rivers["n_chars"] == len(rivers["text"])
    assert rivers["language"] == "und"
    assert CP1252_TEXT.strip() in docs["http://cafe.weblm.test/"]["text"]


def test_drops_are_counted_by_reason(pipeline):
    metrics = json.loads((pipeline.lake / "_metrics" / "extract.json").read_text())
    assert metrics["skipped"] == {"bad_status": 1, "empty_page": 1, "not_html": 1}
    assert metrics["input_rows"] == 9 and metrics["output_rows"] == 6
    assert metrics["decoded_by"] == {"header": 5, "meta": 1} and metrics["replacement_chars"] == 0
    assert any(e["skip_reason"] == "empty_page" and e["url"] == "http://empty.weblm.test/"
               for e in metrics["skipped_examples"])


def test_extraction_is_spread_over_every_core_whatever_the_file_layout(spark):
    from jobs.extract import spread

    cores = spark.sparkContext.defaultParallelism
    one_file = spark.range(40).selectExpr("concat('d', id) AS doc_id", "repeat('x', 100) AS html").coalesce(1)
    spread_out = spread(spark, one_file, one_file, 2)
    assert spread_out.rdd.getNumPartitions() == 2 * cores
    sizes = spread_out.rdd.glom().map(len).collect()
    assert sum(sizes) == 40 and sum(1 for n in sizes if n) > 1, sizes   # the rows, each once, in several tasks
    assert sorted(r.doc_id for r in spread_out.collect()) == sorted(r.doc_id for r in one_file.collect())
    many_files = one_file.repartition(3 * cores)
    assert spread(spark, many_files.where("doc_id != 'd7'"), many_files, 2).rdd.getNumPartitions() == 3 * cores
