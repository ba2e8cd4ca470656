"""jobs.report on a lake the real stages wrote: the funnel adds up, every drop has a reason, the HTML page holds
the funnel and the signal histograms, and a stage that never ran is "not run", not a crash."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import PAGES, Page, write_warc
from jobs.ingest import IngestJob
from jobs.report import NOT_RUN, ReportJob, collect, verdict, write
from jobs.fate import FateJob, render
from spider.warc import NotFetched, RotatingWarcWriter

STAGES = ("ingest", "extract", "quality", "dedup", "tokenize", "export")


def by_stage(report: dict) -> dict:
    return {s["stage"]: s for s in report["stages"]}


def full_lake_args(lake, shards_dir) -> list[str]:
    return ["--lake", str(lake), "-p", f"shards_dir={shards_dir}", "-o", "tokenize.input_table=silver.documents",
            # the fixture's pages repeat one sentence shape: Gopher repetition would drop them all, so only the
            # bad-input and language rules decide here (a real drop: the empty page), and paragraphs are flagged
            "-o", "quality.routing.default.groups=[bad_input]", "-o", "quality.routing.per_language={}",
            "-o", "dedup.paragraphs.mode=flag"]


@pytest.fixture(scope="module")
def full_lake(pipeline, tmp_path_factory):
    """The shared pipeline's lake (ingest, extract, tokenize and export on silver.documents), copied, then the
    quality and dedup stages on it: every stage has run, and tokenize reads what extract kept."""
    from jobs.dedup.job import DedupJob
    from jobs.quality.job import QualityJob

    root = tmp_path_factory.mktemp("report")
    lake = root / "lake"
    shutil.copytree(pipeline.lake, lake)
    common = full_lake_args(lake, pipeline.shards_dir)
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
    assert overall["verdict"] == verdict(overall["kept_text_share"], overall["target_kept_share"])


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


def test_fate_tells_each_url_its_way_and_its_tally_is_the_report(full_lake, pipeline, spark, capsys, tmp_path):
    """jobs.fate over every URL of bronze.pages and one the lake has never seen: tallied over the documents, each
    stage's outcomes are the report's kept and dropped counts; the fixture's own drops read as such, a near copy
    names the document dedup kept instead, and a kept page names the shard sequences export wrote it as."""
    _, report, _ = full_lake
    lake = report["lake"]
    urls = sorted({r["url"] for r in spark.read.format("delta").load(f"{lake}/bronze/pages").select("url").collect()})
    nowhere = "http://nowhere.weblm.test/"
    listed = tmp_path / "urls.txt"
    listed.write_text("# the lake's URLs\n" + "\n".join(urls) + "\n")
    assert FateJob.main(["--json"]) == 2 and "name at least one URL" in capsys.readouterr().err
    assert FateJob.main(full_lake_args(lake, pipeline.shards_dir) + ["--json", "--urls", str(listed), nowhere]) == 1
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    stories = {s["url"]: s for s in printed}
    assert list(stories) == [nowhere, *urls] and stories[nowhere]["documents"] == stories[nowhere]["not_fetched"] == []
    assert stories[nowhere]["host_captures"] == 0 and all("host_captures" not in stories[u] for u in urls)
    tally: dict = {}
    for story in printed:
        for doc in story["documents"]:
            for entry in doc["stages"]:
                key = (entry["stage"], entry["outcome"], entry.get("reason"))
                tally[key] = tally.get(key, 0) + 1
    stages = by_stage(report)
    for stage in STAGES[1:]:
        dropped = {reason: n for (s, outcome, reason), n in tally.items() if s == stage and outcome == "dropped"}
        assert dropped == {k: m["documents"] for k, m in stages[stage]["dropped"].items()}, stage
        kept = sum(n for (s, outcome, _), n in tally.items() if s == stage and outcome in ("kept", "flagged"))
        assert kept == stages[stage]["kept"]["documents"], stage
    (missing,) = stories["http://otters.weblm.test/missing"]["documents"]
    assert missing["status"] == 404 and missing["stages"] == [{"stage": "extract", "outcome": "dropped",
                                                               "reason": "bad_status"}]
    assert "  extract   dropped: bad_status" in render(stories["http://otters.weblm.test/missing"])
    copies = [(doc, entry) for s in printed for doc in s["documents"] for entry in doc["stages"]
              if entry["stage"] == "dedup" and entry["outcome"] == "dropped"]
    assert copies and all(e["duplicate_of"]["survivor_url"] in stories for _, e in copies)
    (rivers,) = stories["http://otters.weblm.test/rivers"]["documents"]
    exported = next(e for e in rivers["stages"] if e["stage"] == "export")
    lineage = spark.read.format("delta").load(f"{lake}/gold/shard_lineage").where(f"doc_id = '{rivers['doc_id']}'")
    assert exported["outcome"] == "kept" and sorted((q["shard"], q["i"]) for q in exported["sequences"]) == sorted(
        (r["shard"], r["i"]) for r in lineage.collect()) != []


def test_fate_reads_no_page_html_and_no_text_only_the_report_does(full_lake, spark):
    """A few documents' ways need no sizes in bytes: reading them would scan every page and text of the lake (its
    files hold doc_ids in no order, so none is skipped).  The report's fates, over every document, do read them."""
    from conf.paths import load_paths
    from jobs.base import local_frame
    from jobs.config import load_jobs_config
    from jobs.report import Lake, document_fates

    lake = full_lake[1]["lake"]
    doc = spark.read.format("delta").load(f"{lake}/bronze/pages").select("doc_id").first()["doc_id"]
    cfg, paths = load_jobs_config([]), load_paths([f"lake={lake}"])
    read = {}
    for who, only in (("fate", local_frame(spark, [(doc,)], "doc_id string")), ("report", None)):
        fates = document_fates(Lake(spark, cfg, paths), only)
        plan = fates.df._jdf.queryExecution().executedPlan().toString()
        read[who] = {column for column in ("html", "text") if re.search(rf"\b{column}:(string|binary)", plan)}
        assert plan.count("ReadSchema") >= 8, plan   # the plan names what each table's scan reads
        fates.release()
    assert read == {"fate": set(), "report": {"html", "text"}}


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


def test_pages_the_crawler_cut_and_urls_it_did_not_fetch_are_shown_under_ingest(spark, tmp_path, capsys):
    """A lake of two ingested WARC files: one whose record says the crawler cut a body (WARC-Truncated: length), one
    of the crawl's records of URLs it did not fetch (one URL twice: a DNS failure, then robots.txt at its recrawl; one
    that was fetched since).  The ingest stage counts the cut page by reason and each URL not fetched once, by its
    latest record's reason, and the page says so; the stages after it have not run."""
    warc = tmp_path / "warc"
    warc.mkdir()
    write_warc(warc / "cut.warc.gz", [Page("http://big.weblm.test/", 200, "text/html", PAGES[0].body[:900],
                                           truncated="length"), PAGES[0]])
    writer = RotatingWarcWriter(warc, "t", 10**9, {"operator": "test"})
    for url, reason, date in [("http://a.weblm.test/x", "dns", "2025-01-01T00:00:00.000000Z"),
                              ("http://a.weblm.test/x", "robots_denied", "2025-01-02T00:00:00.000000Z"),
                              ("http://b.weblm.test/", "dns", "2025-01-01T00:00:00.000000Z"),
                              (PAGES[0].url, "timeout", "2025-01-01T00:00:00.000000Z")]:   # fetched since
        writer.write_not_fetched(NotFetched(url, reason, "", date))
    writer.close()
    common = ["--lake", str(tmp_path / "lake"), "-p", f"warc_dir={warc}"]
    IngestJob().run(common)
    ReportJob().run(common + ["--out", str(tmp_path / "r.html")])
    ingest = by_stage(json.loads((tmp_path / "r.json").read_text()))["ingest"]
    assert ingest["kept"]["documents"] == 2 and ingest["pages_truncated"] == {"length": 1}
    assert ingest["urls_not_fetched"] == {"dns": 1, "robots_denied": 1}
    assert ingest["records_skipped"]["not_fetched"] == 4
    page = (tmp_path / "r.html").read_text()
    assert "Pages kept whose body the crawler cut (WARC-Truncated)" in page and "<td>length</td>" in page
    assert "URLs the crawl did not fetch" in page and "<td>robots_denied</td>" in page
    # jobs.fate: a URL's records in the order they were made; a page whose next stage has not run says so
    capsys.readouterr()
    assert FateJob.main(common + ["http://a.weblm.test/x", "http://big.weblm.test/"]) == 0
    told = capsys.readouterr().out
    assert ("http://a.weblm.test/x\n  crawl     not fetched 2025-01-01T00:00:00Z: dns  [" in told
            and "  crawl     not fetched 2025-01-02T00:00:00Z: robots_denied  [" in told), told
    assert "\n  ingest    no capture in bronze.pages\n" in told
    assert re.search(r"http://big.weblm.test/\n  ingest    doc [0-9a-f]{40}: HTTP 200, .*\n  extract   not run", told)
    assert "as the crawl wrote it" not in told
    # the same URLs spelled otherwise (case, a default port, a fragment, no path) are the same URLs, and say how the
    # crawl wrote them; a path in another case is another URL
    assert FateJob.main(common + ["--json", "HTTP://A.weblm.test:80/x#top", "http://BIG.weblm.test",
                                  "http://a.weblm.test/X", "http://big.weblm.test/elsewhere"]) == 1
    other, bare, capital, elsewhere = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                                       if line.startswith("{")]
    assert [(r["url"], r["reason"]) for r in other["not_fetched"]] == [("http://a.weblm.test/x", "dns"),
                                                                      ("http://a.weblm.test/x", "robots_denied")]
    assert [d["url"] for d in bare["documents"]] == ["http://big.weblm.test/"] and bare["not_fetched"] == []
    assert "host_captures" not in other and "host_captures" not in bare
    assert "\n            as the crawl wrote it: http://a.weblm.test/x" in render(other)
    # no record: how many pages of its host the lake holds tells "never reached the host" from "not this URL"
    assert capital == {"url": "http://a.weblm.test/X", "not_fetched": [], "documents": [], "host_captures": 0}
    assert elsewhere == {"url": "http://big.weblm.test/elsewhere", "not_fetched": [], "documents": [],
                         "host_captures": 1}
    assert "its host has 0 captures in bronze.pages: the crawl never fetched a page of it" in render(capital)
    assert "its host has 1 capture in bronze.pages: the crawl reached the host, not this URL" in render(elsewhere)
    assert "the crawl's frontier says which: python -m spider.lookup URL" in render(elsewhere)


def test_one_url_however_spelled_has_one_canonical_form():
    """jobs.fate's matching: case of scheme and host, a default port, credentials, a fragment, the query's order and
    escapes do not make another URL; the path's case, another port or scheme does; what is not a URL matches only
    itself."""
    from jobs.fate import host_spellings, same_url

    assert {same_url(u) for u in ["http://a.weblm.test/p?x=1&y=%7e", "HTTP://A.WEBLM.TEST:80/p?y=~&x=1#top",
                                  "http://user:pw@a.weblm.test/p?y=%7E&x=1"]} == {"http://a.weblm.test/p?x=1&y=~"}
    assert len({same_url(u) for u in ["http://a.weblm.test/p", "http://a.weblm.test/P", "https://a.weblm.test/p",
                                      "http://a.weblm.test:8080/p"]}) == 4
    assert same_url("http://[::1]:80/a") == same_url("http://[::1]/a") == "http://[::1]/a"
    assert same_url("http://Bücher.example/a") == same_url("http://xn--bcher-kva.example/a")   # the crawl's punycode
    assert same_url("http://a.weblm.test:99999/") == "http://a.weblm.test:99999/"   # no such port: as it is
    assert host_spellings("xn--mller-kva.example") == {"xn--mller-kva.example", "müller.example"}
    assert host_spellings("a.weblm.test") == {"a.weblm.test"} and host_spellings(None) == {None}
    assert host_spellings("xn--zz.example") == {"xn--zz.example"}    # not valid punycode: only as it is


def test_the_kept_share_is_judged_as_it_is_shown():
    """The verdict beside a share printed to 0.1 % agrees with what is printed, at both edges of the target."""
    target = [0.1, 0.2]
    assert [verdict(x, target) for x in (0.0994, 0.0996, 0.15, 0.2004, 0.2006)] == [
        "below target", "within target", "within target", "within target", "above target"]
    assert f"{0.2004:.1%}" == "20.0%" and f"{0.2006:.1%}" == "20.1%"


@pytest.mark.parametrize("driver_urls", [100, 0], ids=["in-process", "pandas-udf"])
def test_spellings_are_found_by_either_way_of_canonicalising(spark, driver_urls):
    """jobs.fate's lookup: the asked hosts' URLs canonicalised in the driver (a few) or by a pandas UDF (past
    `driver_urls`) find the same rows, each with the URL it was asked as; another host's URL of the same path is not
    looked at, a row whose URL has no host is found by its exact spelling, and an IDN host the crawl wrote in Unicode
    by its punycode."""
    from jobs.fate import _spelled, same_url
    from jobs.warc.records import host_of

    rows = ["http://a.weblm.test/p?x=1&y=2", "http://a.weblm.test/q", "http://b.weblm.test/p?x=1&y=2",
            "http://xn--bcher-kva.example/", "not a url", "http://Müller.example/a"]
    df = spark.createDataFrame([(i, u, host_of(u)) for i, u in enumerate(rows)], "i int, url string, host string")
    asked = ["HTTP://A.weblm.test:80/p?y=2&x=1#s", "http://bücher.example", "not a url", "http://c.weblm.test/",
             "http://xn--mller-kva.example/a"]   # an IDN the crawl wrote in Unicode, asked in punycode
    found = _spelled(df, {u: same_url(u) for u in asked}, driver_urls=driver_urls)
    assert sorted((r["i"], r["asked"]) for r in found.select("i", "asked").collect()) == [
        (0, asked[0]), (3, asked[1]), (4, asked[2]), (5, asked[4])]
