"""jobs.extract on real Spark + Delta: bronze.pages -> silver.documents."""
import json

from deltalake import DeltaTable

from conftest import CP1252_TEXT, FOOTER, PAGES, Page, write_warc
from jobs.extract import ExtractJob
from jobs.ingest import IngestJob

SILVER = ["doc_id", "url", "host", "fetch_time", "title", "text", "language", "n_chars", "warc_file", "warc_offset",
          "opt_out", "warc_truncated", "content_sha256"]


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


def test_a_publishers_opt_out_and_a_body_the_crawler_cut_are_flagged_in_silver(spark, tmp_path):
    from datetime import datetime, timezone

    warc, lake = tmp_path / "warc", tmp_path / "lake"
    warc.mkdir()
    html, kind = PAGES[0].body, "text/html; charset=utf-8"
    noai = html.replace(b"<head>", b"<head><meta name='robots' content='noindex, NoAI'>", 1)
    tdm_meta = html.replace(b"<head>", b'<head><meta name="tdm-reservation" content="1">', 1)
    write_warc(warc / "flags.warc.gz", [
        Page("http://tdm.weblm.test/", 200, kind, html, headers=(("TDM-Reservation", "1"),)),
        Page("http://tdm-meta.weblm.test/", 200, kind, tdm_meta),
        Page("http://noai.weblm.test/", 200, kind, noai),
        Page("http://ccbot.weblm.test/", 200, kind, html, headers=(("X-Robots-Tag", "noindex"),
                                                                   ("X-Robots-Tag", "ccbot: noai"))),
        Page("http://googlebot.weblm.test/", 200, kind, html, headers=(("X-Robots-Tag", "googlebot: noai"),)),
        Page("http://free.weblm.test/", 200, kind, html, headers=(("TDM-Reservation", "0"),)),
        Page("http://cut.weblm.test/", 200, kind, html, truncated="length")])
    # silver.documents as an older extract wrote it, without the flag columns: extract adds them
    old = [("old", "http://old.weblm.test/", "old.weblm.test", datetime(2025, 1, 1, tzinfo=timezone.utc), "Old",
            "old text", "und", 8, "old.warc.gz", 0, "x")]
    spark.createDataFrame(old, ", ".join(f"{c} {t}" for c, t in zip(
        [c for c in SILVER if c not in ("opt_out", "warc_truncated")],
        ["string", "string", "string", "timestamp", "string", "string", "string", "int", "string", "long", "string"]))
    ).write.format("delta").save(str(lake / "silver" / "documents"))

    IngestJob().run(["--lake", str(lake), "-p", f"warc_dir={warc}"])
    assert ExtractJob().run(["--lake", str(lake)]).status == "ok"

    table = DeltaTable(str(lake / "silver" / "documents")).to_pyarrow_table().to_pylist()
    flags = {r["url"].split("//")[1].split(".")[0]: (r["opt_out"], r["warc_truncated"]) for r in table}
    assert flags == {"tdm": ("tdm-reservation", None), "tdm-meta": ("tdm-reservation", None), "noai": ("noai", None),
                     "ccbot": ("noai", None),           # conf's opt_out_agents name Common Crawl's crawler
                     "googlebot": (None, None), "free": (None, None), "cut": (None, "length"),
                     "old": (None, None)}               # extracted before the flags: unknown, null
