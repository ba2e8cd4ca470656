"""The quality job on real local Spark + Delta: signals scored once and incrementally, the filter view's
first failing reason, bad input counted not raised, PII redacted in silver.quality, and a re-tuned threshold
that re-decides without recomputing a signal."""
from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from jobs.quality.job import QualityJob
from jobs.quality.heuristics import LineRemoval, c4_remove_lines
from localweb.text import TextGenerator

JAN = datetime(2025, 1, 1, tzinfo=timezone.utc)
ROW = "doc_id string, url string, text string"


def prose(language: str, seed: int, paragraphs: int = 4) -> str:
    gen = TextGenerator(language, random.Random(seed))
    return "\n\n".join(gen.paragraph(4, 6) for _ in range(paragraphs))


DOCS = {
    "en-good": prose("en", 1),
    "en-pii": prose("en", 2) + "\n\nWrite to jane.doe@example.org or call +44 20 7946 0958 before 2024-01-15.",
    "de-good": prose("de", 3),
    "en-repeated": "\n".join(["Buy cheap watches online today, best prices in town!"] * 40),
    "en-short": "The council met in the morning and approved the budget.",
    "empty": "",
    "mojibake": "Caf\ufffd cr\ufffdme br\ufffdl\ufffde " * 40,
    "binary": bytes(range(1, 256)).decode("latin-1") * 8,
    "gibberish": "qzx vbnm kjh ptq wrrr zzt xqq fhhg " * 20,
    "lorem": prose("en", 4) + "\n\nLorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.",
}
EXPECTED = {"en-good": None, "en-pii": None, "de-good": None, "en-repeated": "gopher_dup_line_frac",
            # FineWeb's order runs repetition before quality: in a 10-word text one 3-gram is over 18 % of the chars
            "en-short": "gopher_top_3_gram", "empty": "empty", "mojibake": "mojibake", "binary": "binary_content",
            "gibberish": "language_uncertain", "lorem": "c4_lorem_ipsum"}


def write_documents(spark, lake, docs: dict) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(k, f"http://{k}.test/", v) for k, v in docs.items()], ROW)
    (df.withColumn("host", F.concat(F.col("doc_id"), F.lit(".test"))).withColumn("fetch_time", F.lit(JAN))
     .withColumn("title", F.lit(None).cast("string")).withColumn("language", F.lit("und"))
     .withColumn("n_chars", F.length("text")).withColumn("warc_file", F.lit("f.warc.gz"))
     .withColumn("warc_offset", F.lit(0).cast("long")).withColumn("content_sha256", F.sha2("text", 256))
     .write.format("delta").mode("overwrite").save(str(lake / "silver" / "documents")))


def run(lake, *overrides):
    args = ["--lake", str(lake)]
    for o in overrides:
        args += ["-o", o]
    return QualityJob().run(args)


def read(spark, lake, name):
    layer, _, table = name.partition(".")
    return spark.read.format("delta").load(str(lake / layer / table))


@pytest.fixture(scope="module")
def first(spark, tmp_path_factory):
    lake = tmp_path_factory.mktemp("quality") / "lake"
    write_documents(spark, lake, DOCS)
    return lake, run(lake)


def test_every_document_gets_signals_and_its_first_failing_reason(spark, first):
    from jobs.quality.job import filtered_view
    from jobs.config import load_jobs_config

    lake, metrics = first
    assert metrics.status == "ok" and metrics.extra["signals_computed"] == len(DOCS)
    signals = {r["doc_id"]: r for r in read(spark, lake, "silver.signals").collect()}
    assert set(signals) == set(DOCS)
    assert signals["en-good"]["language"] == "en" and signals["de-good"]["language"] == "de"
    assert signals["en-pii"]["pii_email"] == 1 and signals["en-pii"]["pii_phone"] == 1
    cfg = load_jobs_config().quality
    view = filtered_view(spark, cfg, lambda name: str(lake / name.replace(".", "/")))
    assert {r["doc_id"]: r["drop_reason"] for r in view.collect()} == EXPECTED
    assert spark.sql(f"SELECT count(*) FROM {cfg.view} WHERE drop_reason IS NULL").first()[0] == 3
    dropped = {reason: 1 for reason in EXPECTED.values() if reason}
    assert dict(metrics.skipped) == dropped and metrics.output_rows == 3


def test_silver_quality_holds_kept_documents_with_pii_redacted(spark, first):
    lake, _ = first
    rows = {r["doc_id"]: r for r in read(spark, lake, "silver.quality").collect()}
    assert set(rows) == {"en-good", "en-pii", "de-good"}
    pii = rows["en-pii"]
    assert "Write to <EMAIL> or call <PHONE> before 2024-01-15." in pii["text"]
    assert "jane.doe" not in pii["text"] and pii["n_chars"] == len(pii["text"])
    assert rows["de-good"]["language"] == "de" and rows["de-good"]["language_score"] > 0.65
    assert all(0 < r["quality_score"] <= 1 for r in rows.values())
    assert rows["en-good"]["drop_reason"] is None
    # C4's line removal is on by default (FineWeb's setting): the kept text is datatrove's edit of the extracted one
    fineweb = LineRemoval(enabled=True, filter_no_terminal_punct=False)
    assert rows["en-good"]["text"] == c4_remove_lines(DOCS["en-good"], fineweb)[0] != DOCS["en-good"]
    assert rows["en-good"]["c4_lines_removed"] == c4_remove_lines(DOCS["en-good"], fineweb)[1] > 0


def test_routing_chooses_languages_and_the_rule_groups_each_language_gets(spark, first):
    from jobs.config import load_jobs_config
    from jobs.quality.job import filtered_view

    lake, _ = first
    cfg = load_jobs_config(["quality.routing.languages=[en]", "quality.routing.per_language.en.groups=[bad_input]"]).quality
    reasons = {r["doc_id"]: r["drop_reason"] for r in
               filtered_view(spark, cfg, lambda name: str(lake / name.replace(".", "/"))).collect()}
    assert reasons["de-good"] == "language_not_allowed"
    assert reasons["en-repeated"] is None and reasons["lorem"] is None   # English now gets the bad-input rules only
    assert reasons["empty"] == "empty" and reasons["binary"] == "binary_content"


def test_retuning_a_threshold_recomputes_no_signal_and_a_changed_text_is_scored_alone(spark, first):
    from delta.tables import DeltaTable

    lake, _ = first
    signals_path = str(lake / "silver" / "signals")
    version = DeltaTable.forPath(spark, signals_path).history(1).first()["version"]
    loose = run(lake, "quality.routing.default.min_language_score=0.0", "quality.mode=flag")
    assert loose.extra["signals_computed"] == 0 and not loose.skipped and sum(loose.extra["flagged"].values()) == 7
    assert DeltaTable.forPath(spark, signals_path).history(1).first()["version"] == version
    flagged = {r["doc_id"]: r["drop_reason"] for r in read(spark, lake, "silver.quality").collect()}
    # flag mode: everything stays, with its reason; the gibberish, past the lowered language floor, fails the next rule
    assert flagged == {**EXPECTED, "gibberish": "gopher_top_2_gram"}
    assert loose.extra["redacted"] == len(DOCS) - 3   # the three already redacted are reused

    write_documents(spark, lake, {**DOCS, "en-short": prose("en", 5), "extra": prose("en", 6)})
    again = run(lake)
    assert again.extra["signals_computed"] == 2 and again.extra["redacted"] == 2
    kept = {r["doc_id"] for r in read(spark, lake, "silver.quality").collect()}
    assert kept == {"en-good", "en-pii", "de-good", "en-short", "extra"}
    assert run(lake).extra["signals_computed"] == 0   # idempotent: nothing new, nothing scored
    assert "rules_routed_to_no_language" not in again.extra
    # a rule added in a group that no language routes to applies to nothing: the run says so in its metrics
    stray = run(lake, "quality.filters=[{reason: huge_only, group: test, column: n_chars, min: 1000000}]")
    assert stray.extra["rules_routed_to_no_language"] == ["huge_only"] and stray.extra["signals_computed"] == 0
    assert "gopher_quality" in stray.extra["routed_groups_without_rules"]


def test_c4_line_removal_edits_the_kept_text_counts_it_and_recomputes_no_signal(spark, tmp_path):
    from delta.tables import DeltaTable


    boiler = (prose("en", 7) + "\n\nPlease enable JavaScript to view the comments.\nShare this\n"
              "We use cookies to improve the site, see our privacy policy.")
    menus = "\n".join(["Browse the latest news from the city council", "Find opening hours of the public library",
                       "See the bus timetable for the northern district", "Read the weekly market report online",
                       "Contact the office of the mayor by letter", "Book a seat for the concert in the park"])
    lake = tmp_path / "lake"
    write_documents(spark, lake, {"boiler": boiler, "menus": menus, "de-good": DOCS["de-good"]})
    # English gets the bad-input and C4 filters only, so the menu lines pass as a document (each line counts as a
    # sentence when terminal punctuation is not required) and are then all cut by the line rules
    routing = "quality.routing.per_language.en.groups=[bad_input,c4]"
    # on by default; here with C4's own terminal-punctuation rule, which FineWeb's default leaves off
    edited = run(lake, routing, "quality.c4_line_removal.filter_no_terminal_punct=true")
    strict = LineRemoval(enabled=True, filter_no_terminal_punct=True)
    assert edited.status == "ok" and edited.skipped == {"c4_no_lines_left": 1}
    rows = {r["doc_id"]: r for r in read(spark, lake, "silver.quality").collect()}
    assert set(rows) == {"boiler", "de-good"}
    expected, lines, chars = c4_remove_lines(boiler, strict)
    assert rows["boiler"]["text"] == expected and "JavaScript" not in expected and "Share this" not in expected
    assert (rows["boiler"]["c4_lines_removed"], rows["boiler"]["c4_chars_removed"]) == (lines, chars) and lines >= 3
    assert rows["boiler"]["n_chars"] == len(expected) and rows["boiler"]["source_sha256"] != rows["boiler"]["content_sha256"]
    assert rows["de-good"]["c4_lines_removed"] == c4_remove_lines(DOCS["de-good"], strict)[1]   # German routes to c4
    totals = edited.extra["c4_line_removal"]
    assert totals["lines_removed"] == sum(r["c4_lines_removed"] for r in rows.values()) + 6   # + the emptied menus
    assert totals["documents_edited"] == 3

    signals_path = str(lake / "silver" / "signals")
    version = DeltaTable.forPath(spark, signals_path).history(1).first()["version"]
    off = run(lake, routing, "quality.c4_line_removal.enabled=false")   # off: the extracted text comes back, no signal is recomputed
    assert off.extra["signals_computed"] == 0 and off.extra["redacted"] == 3
    assert DeltaTable.forPath(spark, signals_path).history(1).first()["version"] == version
    rows = {r["doc_id"]: r for r in read(spark, lake, "silver.quality").collect()}
    assert rows["boiler"]["text"] == boiler and rows["menus"]["text"] == menus
    assert {r["c4_lines_removed"] for r in rows.values()} == {0} and "c4_line_removal" not in off.extra


def test_a_scorer_enabled_reconfigured_or_disabled_rescores_its_own_columns_alone(spark, tmp_path):
    from delta.tables import DeltaTable

    lake = tmp_path / "lake"
    docs = {name: DOCS[name] for name in ("en-good", "de-good", "en-pii")}
    write_documents(spark, lake, docs)
    assert run(lake).extra["signals_computed"] == 3
    before = {r["doc_id"]: r.asDict() for r in read(spark, lake, "silver.signals").collect()}
    on = "quality.scorers.toxicity.enabled=true"

    enabled = run(lake, on)
    assert enabled.extra["signals_computed"] == 0 and enabled.extra["scorers_computed"] == {"toxicity": 3}
    after = {r["doc_id"]: r.asDict() for r in read(spark, lake, "silver.signals").collect()}
    for doc_id, row in before.items():   # language ID, heuristics and PII carried over as they were
        assert {column: after[doc_id][column] for column in row} == row
        assert after[doc_id]["toxic_words"] == 0 and after[doc_id]["toxicity_sha256"]
    # alt-profanity-check reads English only (classifier_languages: [en]): German gets no probability
    assert after["en-good"]["toxicity_prob"] is not None and after["de-good"]["toxicity_prob"] is None

    signals_path = str(lake / "silver" / "signals")
    version = DeltaTable.forPath(spark, signals_path).history(1).first()["version"]
    again = run(lake, on)
    assert again.extra["signals_computed"] == 0 and again.extra["scorers_computed"] == {"toxicity": 0}
    assert DeltaTable.forPath(spark, signals_path).history(1).first()["version"] == version

    english_off = "quality.scorers.toxicity.classifier_languages=[]"
    reconfigured = run(lake, on, english_off)
    assert reconfigured.extra["signals_computed"] == 0 and reconfigured.extra["scorers_computed"] == {"toxicity": 3}
    rows = {r["doc_id"]: r for r in read(spark, lake, "silver.signals").collect()}
    assert rows["en-good"]["toxicity_prob"] is None
    assert rows["en-good"]["toxicity_sha256"] != after["en-good"]["toxicity_sha256"]

    write_documents(spark, lake, {**docs, "de-good": prose("de", 7)})   # a changed text is scored whole, alone
    changed = run(lake, on, english_off)
    assert changed.extra["signals_computed"] == 1 and changed.extra["scorers_computed"] == {"toxicity": 1}

    disabled = run(lake)
    assert disabled.extra["signals_computed"] == 0 and disabled.extra["scorers_computed"] == {}
    table = read(spark, lake, "silver.signals")
    assert "toxic_words" not in table.columns and "toxicity_sha256" not in table.columns
    assert {r["doc_id"]: r["language_score"] for r in table.collect()}["en-good"] == before["en-good"]["language_score"]
    assert {r["doc_id"] for r in read(spark, lake, "silver.quality").collect()} == set(docs)


def test_an_opted_out_document_is_dropped_first_in_every_language_and_a_cut_one_only_if_a_rule_says(spark, first):
    from dataclasses import replace

    from pyspark.sql import functions as F

    from jobs.config import FilterRule, load_jobs_config
    from jobs.quality.filters import filtered
    from jobs.quality.job import DOCUMENT_COLUMNS

    lake, _ = first
    doc = F.col("doc_id")
    documents = (read(spark, lake, "silver.documents").select(*DOCUMENT_COLUMNS)
                 .withColumn("opt_out", F.when(doc == "en-good", "tdm-reservation").when(doc == "empty", "noai"))
                 .withColumn("warc_truncated", F.when(doc == "de-good", "length")))
    signals = read(spark, lake, "silver.signals")

    def reasons(cfg, docs=documents):
        return {r["doc_id"]: r["drop_reason"] for r in filtered(docs, signals, cfg).collect()}

    cfg = load_jobs_config().quality
    got = reasons(cfg)
    plain = reasons(cfg, documents.withColumn("opt_out", F.lit(None)).withColumn("warc_truncated", F.lit(None)))
    assert got["en-good"] == "opt_out" and got["empty"] == "opt_out"   # before bad input ("empty"): the first reason
    assert got["de-good"] is None and plain["de-good"] is None         # cut, kept by default
    assert {k: v for k, v in got.items() if k not in ("en-good", "empty")} == {
        k: v for k, v in plain.items() if k not in ("en-good", "empty")}   # no flag, no change
    # group `all`: English routed to no rule group still loses its opted-out page
    bare = load_jobs_config(["quality.routing.per_language.en.groups=[]"]).quality
    assert reasons(bare)["en-good"] == "opt_out"
    strict = replace(cfg, filters=[*cfg.filters, FilterRule("warc_truncated", "all", "warc_truncated", when_set=True)])
    assert reasons(strict)["de-good"] == "warc_truncated"
    with pytest.raises(ValueError, match="has neither min nor max nor when_set"):
        reasons(replace(cfg, filters=[FilterRule("flag", "all", "opt_out")]))
