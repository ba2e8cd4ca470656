"""jobs.report on a lake the real stages wrote: the funnel adds up, every drop has a reason, the HTML page holds
the funnel and the signal histograms, and a stage that never ran is "not run", not a crash."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import PAGES, Page, write_warc
from jobs.ingest import IngestJob
from jobs.report import NOT_RUN, ReportJob, collect, write

STAGES = ("ingest", "extract", "quality", "dedup", "tokenize", "export")


def by_stage(report: dict) -> dict:
    return {s["stage"]: s for s in report["stages"]}


@pytest.fixture(scope="module")
def full_lake(pipeline, tmp_path_factory):
    """The shared pipeline's lake (ingest, extract, tokenize and export on silver.documents), copied, then the
    quality and dedup stages on it: every stage has run, and tokenize reads what extract kept."""
    from jobs.dedup.job import DedupJob
    from jobs.quality.job import QualityJob

    root = tmp_path_factory.mktemp("report")
    lake = root / "lake"
    shutil.copytree(pipeline.lake, lake)
    common = ["--lake", str(lake), "-p", f"shards_dir={pipeline.shards_dir}", "-o", "tokenize.input_table=silver.documents",
              # the fixture's pages repeat one sentence shape: Gopher repetition would drop them all, so only the
              # bad-input and language rules decide here (a real drop: the empty page), and paragraphs are flagged
              "-o", "quality.routing.default.groups=[bad_input]", "-o", "quality.routing.per_language={}",
              "-o", "dedup.paragraphs.mode=flag"]
    for job in (QualityJob, DedupJob):
        job().run(common)
    out = root / "out" / "report.html"
    metrics = ReportJob().run(common + ["--out", str(out)])
    return metrics, json.loads(out.with_suffix(".json").read_text()), out.read_text()


# (stage, the stage whose output it reads): here tokenize reads silver.documents, as the shared fixture ran it
READS = (("extract", "ingest"), ("quality", "extract"), ("dedup", "quality"), ("tokenize", "extract"),
         ("export", "tokenize"))


def test_every_stage_ran_and_each_stage_keeps_what_the_next_one_reads(full_lake):
    metrics, report, _ = full_lake
    stages = by_stage(report)
    assert metrics.status == "ok" and metrics.extra["not_run"] == []
    assert [s["stage"] for s in report["stages"]] == list(STAGES)
    assert all(s["status"] == "ok" for s in report["stages"])
    for stage, reads in READS:
        assert stages[reads]["kept"]["documents"] == stages[stage]["input"]["documents"], (stage, reads)
    assert stages["tokenize"]["tables"] == "silver.documents -> gold.tokens"  # the report follows conf


def test_drops_per_reason_sum_to_each_stage_drops(full_lake):
    _, report, _ = full_lake
    for stage in report["stages"]:
        dropped = sum(m["documents"] for m in stage["dropped"].values())
        assert dropped == stage["dropped_total"]["documents"]
        assert stage["input"]["documents"] == stage["kept"]["documents"] + dropped, stage["stage"]


def test_totals_match_the_tables(full_lake, spark):
    _, report, _ = full_lake
    stages = by_stage(report)
    lake = report["lake"]

    def table(name):
        return spark.read.format("delta").load(f"{lake}/{name.replace('.', '/')}")

    assert stages["ingest"]["input"]["documents"] == table("bronze.pages").count()
    assert stages["extract"]["kept"]["documents"] == table("silver.documents").count()
    assert stages["extract"]["kept"]["chars"] == table("silver.documents").agg({"n_chars": "sum"}).first()[0]
    assert stages["quality"]["kept"]["documents"] == table("silver.quality").count()
    assert stages["dedup"]["kept"]["documents"] == table("silver.deduped").count()
    gold = table("gold.tokens")
    assert stages["tokenize"]["kept"]["tokens"] == gold.agg({"n_tokens": "sum"}).first()[0]
    assert stages["tokenize"]["kept"]["tokens_estimated"] is False
    # the fixture's own drops, by the stage that made them: the 404, the PNG, the empty page; the near copy
    assert set(stages["extract"]["dropped"]) == {"bad_status", "not_html", "empty_page"}
    assert sum(m["documents"] for m in stages["extract"]["dropped"].values()) == (
        table("bronze.pages").count() - table("silver.documents").count())
    decision = {r["drop_reason"]: r["count"] for r in table("dedup.documents").where("drop_reason IS NOT NULL")
                .groupBy("drop_reason").count().collect()}
    assert {k: stages["dedup"]["dropped"][k]["documents"] for k in decision} == decision
    # tokens of text that was never tokenized are estimates, and say so
    assert report["chars_per_token"] > 1
    assert stages["extract"]["kept"]["tokens_estimated"] is True
    # the export stage reads the manifest: shards and the realized mix per source
    manifest = json.loads(open(stages["export"]["manifest"]).read())
    assert stages["export"]["shards"] == len(manifest["shards"]) >= 1
    assert stages["export"]["realized_mix"] == manifest["mix"]["realized"]
    overall = report["overall"]
    assert overall["final_table"] == "silver.deduped"
    assert overall["kept_text_share"] == pytest.approx(stages["dedup"]["kept"]["chars"] / stages["extract"]["kept"]["chars"])
    assert overall["verdict"] in ("below target", "within target", "above target")


def test_retention_per_language_and_host_adds_up_to_the_funnel(full_lake):
    _, report, _ = full_lake
    stages = by_stage(report)
    for key in ("languages", "hosts"):
        rows = report["retention"][key]
        assert sum(r["documents"] for r in rows) == stages["extract"]["kept"]["documents"]
        assert sum(r["documents_kept"] for r in rows) == stages["dedup"]["kept"]["documents"]
    hosts = {r["host"]: r for r in report["retention"]["hosts"]}
    assert hosts["empty.weblm.test"]["pages"] == 1 and hosts["empty.weblm.test"]["documents"] == 0


def test_signal_histograms_cover_every_numeric_signal_with_the_conf_thresholds(full_lake, spark):
    _, report, page = full_lake
    hists = report["signal_histograms"]
    signals = spark.read.format("delta").load(f"{report['lake']}/silver/signals")
    numeric = [f.name for f in signals.schema.fields
               if f.dataType.typeName() in ("integer", "long", "short", "float", "double")]
    assert sorted(hists["columns"]) == sorted(numeric)
    assert hists["columns"]["n_chars"]["thresholds"] == [{"reason": "empty", "min": 1.0, "max": None}]
    assert sum(hists["columns"]["n_chars"]["counts"]) == signals.count() == hists["rows"]
    for column in numeric:
        assert f'alt="histogram of {column}"' in page


def test_the_page_is_self_contained_and_holds_the_funnel(full_lake):
    _, report, page = full_lake
    assert 'alt="funnel: documents kept and dropped per stage"' in page
    assert re.search(r'<img alt="[^"]+" src="data:image/png;base64,', page)
    assert not re.search(r'(src|href)="(https?:)?//', page), "nothing may load from outside the file"
    funnel = page.split('<table class="funnel">')[1].split("</table>")[0]
    for stage in report["stages"]:
        kept = f"{stage['kept']['documents']:,}"
        assert re.search(rf"<td>{stage['stage']}</td><td><span class=\"ok\">ok</span></td>.*?<td>{kept}</td>", funnel)
    assert "≈" in page  # estimated tokens are marked as such
    assert report["tdm_reservations"] == [] and "No host's TDMRep file" in page   # no local web host reserves


def test_a_stage_that_never_ran_is_reported_as_not_run(pipeline, tmp_path):
    """The shared pipeline ran no quality or dedup stage: the report says so and still covers the rest."""
    from conf.paths import load_paths
    from jobs.config import load_jobs_config

    cfg = load_jobs_config(["tokenize.input_table=silver.documents"])
    paths = load_paths([f"lake={pipeline.lake}", f"shards_dir={pipeline.shards_dir}"])
    from pyspark.sql import SparkSession

    report = collect(SparkSession.getActiveSession(), cfg, paths)
    stages = by_stage(report)
    assert stages["quality"]["status"] == stages["dedup"]["status"] == NOT_RUN
    assert "python -m jobs.quality.job" in stages["quality"]["why"]
    assert stages["extract"]["kept"]["documents"] == stages["tokenize"]["input"]["documents"]
    assert report["signal_histograms"] == {}
    assert report["overall"]["final_table"] == "silver.documents"
    html_path, json_path = write(report, str(tmp_path / "r.html"))
    page = open(html_path).read()
    assert page.count('<span class="notrun">not run</span>') == 2
    assert "not run: silver.signals is absent" in page
    assert json.loads(open(json_path).read())["stages"][2]["status"] == NOT_RUN


def test_pages_the_crawler_cut_are_shown_under_ingest(spark, tmp_path):
    """A lake of one ingested WARC file whose record says the crawler cut a body (WARC-Truncated: length): the
    ingest stage counts that page by reason, and the page says so; the stages after it have not run."""
    warc = tmp_path / "warc"
    warc.mkdir()
    write_warc(warc / "cut.warc.gz", [Page("http://big.weblm.test/", 200, "text/html", PAGES[0].body[:900],
                                           truncated="length"), PAGES[0]])
    common = ["--lake", str(tmp_path / "lake"), "-p", f"warc_dir={warc}"]
    IngestJob().run(common)
    ReportJob().run(common + ["--out", str(tmp_path / "r.html")])
    ingest = by_stage(json.loads((tmp_path / "r.json").read_text()))["ingest"]
    assert ingest["kept"]["documents"] == 2 and ingest["pages_truncated"] == {"length": 1}
    page = (tmp_path / "r.html").read_text()
    assert "Pages kept whose body the crawler cut (WARC-Truncated)" in page and "<td>length</td>" in page
