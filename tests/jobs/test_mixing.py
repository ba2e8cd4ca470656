"""jobs.mixing: source tags from URL rules, mix rates, deterministic copies."""
import pytest
from pyspark.sql import functions as F

from jobs import mixing
from jobs.config import SourceRule, load_jobs_config

RULES = [SourceRule("code", r"^https?://([^/]*\.)?github\.com(/|$)"), SourceRule("wiki", r"wikipedia\.org/")]
URLS = ["https://github.com/a/b", "https://gist.github.com/x", "https://notgithub.com/",
        "http://en.wikipedia.org/wiki/X", None, "http://example.org/"]


def test_the_first_matching_rule_names_the_source_in_python_and_in_spark(spark):
    from pyspark.sql import functions as F

    expected = [mixing.source_of(u, RULES, "web") for u in URLS]
    assert expected == ["code", "code", "web", "wiki", "web", "web"]
    df = spark.createDataFrame([(i, u) for i, u in enumerate(URLS)], "i int, url string")
    got = [r.source for r in df.select("i", mixing.source_column(F.col("url"), RULES, "web").alias("source"))
           .orderBy("i").collect()]
    assert got == expected


def test_rates_meet_the_target_shares():
    tokens = {"web": 900, "code": 100}
    assert mixing.sampling_rates(tokens, {}) == {"web": 1.0, "code": 1.0}
    rates = mixing.sampling_rates(tokens, {"web": 0.5, "code": 0.5})
    assert rates == pytest.approx({"web": 500 / 900, "code": 5.0})
    assert mixing.sampling_rates(tokens, {"code": 1}, total_tokens=50) == {"web": 0.0, "code": 0.5}
    with pytest.raises(ValueError, match="no weight to any source the input has"):
        mixing.sampling_rates(tokens, {"academic": 1})
    report = mixing.realized_mix({"web": 500, "code": 500}, {"web": 0.5, "code": 0.5}, tokens)
    assert report["code"] == {"input_tokens": 100, "tokens": 500, "share": 0.5, "target_share": 0.5}


def test_copies_are_deterministic_and_average_the_rate(spark):
    from pyspark.sql import functions as F

    df = spark.range(4000).select(F.col("id").cast("string").alias("doc_id"))
    u = mixing.unit_hash(1, F.col("doc_id"))
    counts = df.select(mixing.copies_column(F.lit(2.25), u).alias("c"), u.alias("u")).collect()
    assert {r.c for r in counts} == {2, 3}
    assert all(r.c == mixing.expected_copies(2.25, r.u) for r in counts)
    assert sum(r.c for r in counts) / len(counts) == pytest.approx(2.25, abs=0.03)
    again = df.select(mixing.copies_column(F.lit(2.25), u).alias("c")).collect()
    assert [r.c for r in again] == [r.c for r in counts]


def test_the_configured_mix_must_exist():
    cfg = load_jobs_config(["export.mix.name=nope"]).export.mix
    with pytest.raises(ValueError, match="is not in export.mix.mixes"):
        mixing.mix_weights(cfg)


def test_rules_on_language_and_quality_tag_the_same_in_python_and_in_spark(spark):
    rules = [SourceRule("code", r"github\.com/"), SourceRule("web_hq", min_quality=0.8, languages=["en", "de"]),
             SourceRule("web_de", languages=["de"])]
    rows = [("https://github.com/x", "en", 0.1), ("http://a.org/", "en", 0.9), ("http://a.org/", "de", 0.5),
            ("http://a.org/", "fr", 0.95), ("http://a.org/", None, None), ("http://a.org/", "en", 0.8)]
    expected = [mixing.source_of(u, rules, "web", lang, q) for u, lang, q in rows]
    assert expected == ["code", "web_hq", "web_de", "web", "web", "web_hq"]
    df = spark.createDataFrame([(i, *r) for i, r in enumerate(rows)],
                               "i int, url string, language string, quality_score double")
    tagged = df.select("i", mixing.source_tag(df, load_jobs_config().export.mix).alias("x"),
                                       mixing.source_column(F.col("url"), rules, "web", F.col("language"),
                                                            F.col("quality_score")).alias("source")).orderBy("i").collect()
    assert [r.source for r in tagged] == expected
    assert [r.x for r in tagged] == ["code"] + ["web"] * 5   # the default rules: domains only
    with pytest.raises(ValueError, match="needs a quality_score column"):
        mixing.source_column(F.col("url"), rules[1:2], "web", F.col("language"))
    with pytest.raises(ValueError, match="gives no condition"):
        SourceRule("everything")


def test_a_schedule_names_its_stages_in_order_with_normalised_shares():
    cfg = load_jobs_config(["export.mix.name=pretrain_then_anneal"]).export.mix
    stages = mixing.mix_stages(cfg)
    assert [(s["stage"], s["mix"]) for s in stages] == [("broad", "web_heavy"), ("anneal", "high_quality")]
    assert sum(s["share"] for s in stages) == pytest.approx(1.0) and stages[1]["weights"] == cfg.mixes["high_quality"]
    plain = mixing.mix_stages(load_jobs_config().export.mix)
    assert plain == [{"stage": "main", "mix": "natural", "weights": {}, "share": 1.0}]
    for bad, message in (("export.mix.schedules={s: [{stage: a, mix: nope}]}", "not in export.mix.mixes"),
                         ("export.mix.schedules={s: [{stage: a, mix: natural}, {stage: a, mix: natural}]}",
                          "repeats a stage name"),
                         ("export.mix.schedules={s: [{stage: a, mix: natural, share: 0}]}", "must be a number > 0"),
                         ("export.mix.schedules={s: []}", "must be a list")):
        with pytest.raises(ValueError, match=message):
            mixing.mix_stages(load_jobs_config(["export.mix.name=s", bad]).export.mix)
