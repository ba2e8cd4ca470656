"""jobs.mixing: source tags from URL rules, mix rates, deterministic copies."""
import pytest

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
    with pytest.raises(ValueError, match="export.mix.mixes has only"):
        mixing.mix_weights(cfg)
