"""The dedup job on real local Spark + Delta: decisions, reasons, survivors, bad input, paragraphs,
contamination, the per-stage report, and incremental runs against the persisted band table."""
from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import pytest

from jobs.dedup.job import DedupJob

JAN, FEB, MAR = (datetime(2025, m, 1, tzinfo=timezone.utc) for m in (1, 2, 3))
BOILERPLATE = "Subscribe to our newsletter for weekly updates on everything that matters to you."
PASSAGE = ("In the beginning the committee met every week to discuss the budget of the new library "
           "and the plans for the children's reading room on the second floor")
VOCAB = ["".join(random.Random(i).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3 + i % 7)) for i in range(1800)]
ROW = "doc_id string, url string, fetch_time timestamp, text string, quality_score double"


def prose(rng: random.Random, words: int, per_line: int = 30) -> str:
    vocab = VOCAB  # letters only: digits fold to 0 in normalization
    ws = [rng.choice(vocab) for _ in range(words)]
    return "\n".join(" ".join(ws[i:i + per_line]) for i in range(0, len(ws), per_line))


def drop_words(text: str, start: int, count: int) -> str:
    words = text.split(" ")
    return " ".join(words[:start] + words[start + count:])


def chinese(rng: random.Random, chars: int) -> str:
    pool = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后"
    return "".join(rng.choice(pool) for _ in range(chars))


def write_silver(spark, lake, rows) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame(rows, ROW)
    for column, value in (("host", None), ("title", None), ("language", "und"), ("warc_file", "f.warc.gz")):
        df = df.withColumn(column, F.lit(value).cast("string"))
    (df.withColumn("warc_offset", F.lit(0).cast("long")).withColumn("n_chars", F.length("text"))
     .withColumn("content_sha256", F.sha2("text", 256))
     .write.format("delta").mode("overwrite").save(str(lake / "silver" / "documents")))


def run(lake, *overrides, extra=()):
    args = ["--lake", str(lake), "-o", "dedup.input_table=silver.documents", *extra]  # the fixture writes silver.documents
    for o in overrides:
        args += ["-o", o]
    return DedupJob().run(args)


def table(spark, lake, name):
    layer, _, t = name.partition(".")
    return spark.read.format("delta").load(str(lake / layer / t))


IDENTICAL = 1000  # the 100 K-document bucket, scaled down for a 2-core test run


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(11)
    rows = []
    bases = [prose(rng, 300) for _ in range(6)]
    for i, base in enumerate(bases):
        text = base + ("\n" + BOILERPLATE if i >= 2 else "")
        rows.append((f"base-{i}", f"http://s{i}.test/a", JAN, text, 0.9 if i == 0 else None))
        # ~3% of the words deleted in one place: Jaccard ~0.9 with the base, fetched a month later
        rows.append((f"near-{i}", f"http://m{i}.test/a", FEB, drop_words(text, 100, 8), 0.1 if i == 0 else None))
    rows.append(("copy-a", "http://c.test/a", JAN, bases[1].upper().replace("\n", " ,, "), None))  # same after normalization
    rows.append(("url-old", "http://u.test/page", JAN, prose(rng, 120), None))
    rows.append(("url-new", "http://u.test/page", MAR, prose(rng, 120), None))
    rows += [("empty", "http://e.test/1", JAN, "", None), ("punct", "http://e.test/2", JAN, "!!! ... ???", None),
             ("one-word-a", "http://o.test/1", JAN, "hello", None), ("one-word-b", "http://o.test/2", FEB, "Hello!", None)]
    rows.append(("giant-line", "http://g.test/", JAN, "\n".join(["Buy cheap watches online today, best prices!"] * 3000), None))
    same = prose(rng, 80)
    rows += [(f"ident-{i:04d}", f"http://i.test/{i}", JAN, same, None) for i in range(IDENTICAL)]
    zh = chinese(rng, 400)
    rows += [("zh-a", "http://zh.test/a", JAN, zh, None),
             ("zh-b", "http://zh.test/b", FEB, zh[:200] + "了" + zh[203:], None),
             ("zh-c", "http://zh.test/c", JAN, chinese(rng, 400), None)]
    rows.append(("contam", "http://x.test/", JAN, prose(rng, 150, 1000) + " " + PASSAGE + " " + prose(rng, 150, 1000), None))
    return rows


@pytest.fixture(scope="module")
def dedup_run(spark, corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("dedup")
    evals = root / "evals"
    evals.mkdir()
    (evals / "library_qa.jsonl").write_text(json.dumps({"question": PASSAGE, "answer": "weekly"}) + "\n"
                                            + json.dumps({"text": "too short to match"}) + "\n")
    lake = root / "lake"
    write_silver(spark, lake, corpus)
    metrics = run(lake, f"dedup.contamination.eval_sets=[{evals / 'library_qa.jsonl'}]")
    docs = {r["doc_id"]: r.asDict() for r in table(spark, lake, "dedup.documents").collect()}
    out = {r["doc_id"]: r.asDict() for r in table(spark, lake, "silver.deduped").collect()}
    return lake, metrics, docs, out


def test_near_duplicates_keep_the_newest_fetch_unless_quality_says_otherwise(dedup_run):
    _, _, docs, _ = dedup_run
    assert docs["near-0"]["drop_reason"] == "near_duplicate" and docs["near-0"]["survivor_id"] == "base-0"
    for i in range(2, 6):
        assert docs[f"base-{i}"]["drop_reason"] == "near_duplicate", i
        assert docs[f"base-{i}"]["survivor_id"] == f"near-{i}" and docs[f"near-{i}"]["keep"]
        assert docs[f"base-{i}"]["cluster_id"] == docs[f"near-{i}"]["cluster_id"]
        assert docs[f"near-{i}"]["cluster_size"] == 2


def test_exact_copies_after_normalization_and_refetched_urls_are_dropped(dedup_run):
    _, _, docs, _ = dedup_run
    # base-1's near copy is newer, so base-1 goes; copy-a (the same text as base-1) follows it to near-1
    assert docs["base-1"]["drop_reason"] == "near_duplicate"
    assert docs["copy-a"]["drop_reason"] == "exact_duplicate" and docs["copy-a"]["survivor_id"] == "near-1"
    assert docs["url-old"]["drop_reason"] == "url_refetched" and docs["url-old"]["survivor_id"] == "url-new"
    assert docs["url-new"]["keep"]


def test_every_dropped_document_names_a_kept_survivor(dedup_run):
    _, _, docs, _ = dedup_run
    for doc_id, d in docs.items():
        if not d["keep"]:
            assert d["drop_reason"] and docs[d["survivor_id"]]["keep"], doc_id


def test_bad_input_is_handled_and_counted(dedup_run):
    _, metrics, docs, out = dedup_run
    assert docs["empty"]["keep"] and docs["punct"]["keep"] and docs["empty"]["text_key"] is None
    assert metrics.extra["not_deduplicated_no_words"] == 2
    assert {docs["one-word-a"]["drop_reason"], docs["one-word-b"]["drop_reason"]} == {None, "exact_duplicate"}
    kept_ident = [k for k, d in docs.items() if k.startswith("ident-") and d["keep"]]
    assert kept_ident == ["ident-0000"]
    assert docs["ident-0999"]["cluster_size"] == IDENTICAL
    # the giant line collapses to one line (within-document paragraph dedup), too short to keep
    assert docs["giant-line"]["keep"] and "giant-line" not in out
    assert docs["giant-line"]["n_words"] == 7 * 3000  # signed in one piece (its distinct shingles: test_dedup_text)


def test_cjk_near_duplicates_are_found(dedup_run):
    _, _, docs, _ = dedup_run
    assert docs["zh-a"]["n_shingles"] > 300
    assert docs["zh-a"]["drop_reason"] == "near_duplicate" and docs["zh-a"]["survivor_id"] == "zh-b"
    assert docs["zh-c"]["keep"]


def test_boilerplate_paragraph_stays_in_one_document(dedup_run):
    _, metrics, _, out = dedup_run
    holders = [k for k, d in out.items() if BOILERPLATE in d["text"]]
    assert len(holders) == 1
    assert metrics.extra["paragraphs_removed"] >= 3
    assert sum(d["text"].count("Buy cheap watches") for d in out.values()) == 0


def test_contamination_is_cut_and_reported_per_benchmark(spark, dedup_run):
    lake, metrics, _, out = dedup_run
    assert "committee met every week" not in out["contam"]["text"]
    assert out["contam"]["contamination_hits"] > 0 and len(out["contam"]["text"]) >= 200
    assert metrics.extra["contamination"]["per_benchmark"] == {"library_qa": 1}
    row = table(spark, lake, "dedup.contamination").collect()
    assert [(r["doc_id"], r["benchmarks"]) for r in row] == [("contam", ["library_qa"])]


def test_the_report_gives_every_stage_and_every_reason(dedup_run):
    lake, metrics, docs, out = dedup_run
    stages = {s["stage"]: s for s in metrics.extra["stages"]}
    assert list(stages) == ["url", "exact", "near", "paragraphs", "contamination"]
    assert stages["url"]["dropped"] == {"url_refetched": 1}
    assert stages["exact"]["dropped"]["exact_duplicate"] == IDENTICAL - 1 + 2  # identical docs, copy-a, one-word
    assert stages["near"]["dropped"]["near_duplicate"] == 7  # six bases/near pairs and zh-a
    assert stages["paragraphs"]["dropped"] == {"too_short_after_paragraphs": 1}
    for a, b in zip(metrics.extra["stages"], metrics.extra["stages"][1:]):
        assert a["out"] == b["in"]
    assert metrics.output_rows == len(out) == stages["contamination"]["out"]
    assert dict(metrics.skipped) == {"url_refetched": 1, "exact_duplicate": IDENTICAL + 1, "near_duplicate": 7,
                                     "too_short_after_paragraphs": 1}
    saved = json.loads((lake / "_metrics" / "dedup.json").read_text())
    assert saved["status"] == "ok" and saved["stages"] == metrics.extra["stages"]
    assert saved["shuffle_partitions"] == 2  # a small run: one partition per core, not dedup.shuffle_partitions


def test_a_bucket_of_many_identical_documents_takes_the_star_path(spark, corpus, tmp_path):
    """With exact dedup off, the identical documents land in one LSH bucket per band: a giant bucket."""
    lake = tmp_path / "lake"
    write_silver(spark, lake, [r for r in corpus if r[0].startswith(("ident-", "base-", "near-"))])
    metrics = run(lake, "dedup.exact.enabled=false", "dedup.paragraphs.enabled=false")
    assert metrics.extra["giant_buckets"] >= 20 and metrics.extra["largest_bucket"] == IDENTICAL
    docs = {r["doc_id"]: r for r in table(spark, lake, "dedup.documents").collect()}
    assert [k for k, d in docs.items() if k.startswith("ident-") and d["keep"]] == ["ident-0000"]
    assert docs["ident-0500"]["drop_reason"] == "near_duplicate" and docs["ident-0500"]["cluster_size"] == IDENTICAL


@pytest.mark.parametrize("components_on", ["driver", "executors"])
def test_a_giant_bucket_of_near_duplicates_is_centred_on_its_survivor(spark, tmp_path, components_on):
    """Near-duplicates (not identical) in buckets too big for all pairs: each star is centred on the document the
    survivor rule keeps (here the newest fetch, the largest doc_id), so every other one has a verified pair with
    it and is dropped; a star on the smallest doc_id would leave them without a kept partner, all kept.
    The same decision whether components and survivors are computed on the driver or in Spark's rounds."""
    rng = random.Random(5)
    base = prose(rng, 300).replace("\n", " ")
    rows = [(f"var-{i:03d}", f"http://v{i}.test/", MAR if i == 59 else JAN, drop_words(base, 5 * i, 2), None)
            for i in range(60)]
    lake = tmp_path / "lake"
    write_silver(spark, lake, rows)
    metrics = run(lake, "dedup.minhash.all_pairs_max_bucket=10", "dedup.paragraphs.enabled=false",
                  f"dedup.components.driver_max_edges={0 if components_on == 'executors' else 1000}")
    assert metrics.extra["giant_buckets"] > 0 and metrics.extra["largest_bucket"] > 10
    assert metrics.extra["components_on"] == components_on
    docs = {r["doc_id"]: r for r in table(spark, lake, "dedup.documents").collect()}
    assert [k for k, d in docs.items() if d["keep"]] == ["var-059"]
    assert all(d["drop_reason"] == "near_duplicate" and d["survivor_id"] == "var-059"
               for k, d in docs.items() if k != "var-059")


def test_incremental_runs_sign_only_new_documents(spark, tmp_path):
    rng = random.Random(5)
    old = [(f"old-{i}", f"http://old.test/{i}", JAN, prose(rng, 200), None) for i in range(8)]
    lake = tmp_path / "lake"
    write_silver(spark, lake, old)
    first = run(lake)
    assert first.extra["signed"] == 8
    new = [("new-near", "http://new.test/1", MAR, drop_words(old[3][3], 50, 5), None),
           ("new-copy", "http://new.test/2", FEB, old[5][3], None),
           ("new-other", "http://new.test/3", MAR, prose(rng, 200), None)]
    write_silver(spark, lake, old + new)
    second = run(lake)
    assert second.extra["signed"] == 3
    assert second.extra["band_rows_added"] == 2 * 20  # the exact copy adds no bands: its text is indexed
    docs = {r["doc_id"]: r for r in table(spark, lake, "dedup.documents").collect()}
    assert docs["old-3"]["drop_reason"] == "near_duplicate" and docs["old-3"]["survivor_id"] == "new-near"
    # the newer fetch of the same text survives; the old copy goes
    assert docs["old-5"]["drop_reason"] == "exact_duplicate" and docs["old-5"]["survivor_id"] == "new-copy"
    assert table(spark, lake, "dedup.signals").count() == 11
    version = table(spark, lake, "silver.deduped").count(), _version(spark, lake / "silver" / "deduped")
    third = run(lake)
    assert third.extra["signed"] == 0
    assert (table(spark, lake, "silver.deduped").count(), _version(spark, lake / "silver" / "deduped")) == version
    # a stricter threshold re-decides from the stored pairs, signing nothing
    decided = run(lake, "dedup.minhash.threshold=0.99", extra=("--decide-only",))
    assert "signed" not in decided.extra
    docs = {r["doc_id"]: r for r in table(spark, lake, "dedup.documents").collect()}
    assert docs["old-3"]["keep"] and docs["old-5"]["drop_reason"] == "exact_duplicate"
    # signatures made under other settings are refused, not mixed
    with pytest.raises(RuntimeError, match="--full"):
        run(lake, "dedup.minhash.seed=2")


def _version(spark, path):
    from jobs.base import table_version

    return table_version(spark, str(path))


def test_paragraph_rules_count_documents_rank_by_priority_and_rewrite_only_losers(spark):
    from types import SimpleNamespace

    from jobs.dedup import paragraphs

    rng = random.Random(5)
    body = [prose(rng, 40, 40) for _ in range(4)]
    banner = "Accept all cookies, manage preferences."
    rows = [("a", body[0] + "\n" + banner + "\nRepeat me\nrepeat ME!", 0.2, JAN),
            ("b", banner + "\n" + body[1], 0.9, JAN),   # highest quality: keeps the banner
            ("c", body[2] + "\n\n" + banner, None, MAR),
            ("d", body[3] + "\nRepeat me", None, None),
            ("e", None, None, None)]
    docs = spark.createDataFrame(rows, "doc_id string, text string, p_quality double, p_time timestamp")

    def run_with(**kw):
        cfg = SimpleNamespace(**{"max_docs": 1, "within_doc": True, "mode": "remove", "min_doc_chars": 10, **kw})
        return {r["doc_id"]: r.asDict() for r in paragraphs.dedup_paragraphs(docs, cfg).collect()}

    out = run_with()
    assert out["b"]["text"] == rows[1][1] and out["b"]["paragraphs_removed"] == 0
    assert out["c"]["text"] == body[2] + "\n" and out["c"]["paragraphs_removed"] == 1  # the empty line stays
    # "Repeat me" is in a and d: a ranks first (quality before none); its second copy in a goes (within_doc)
    assert out["a"]["text"] == body[0] + "\nRepeat me" and out["a"]["paragraphs_removed"] == 2
    assert out["d"]["text"] == body[3] and out["d"]["paragraphs_removed"] == 1
    assert out["e"] == {"doc_id": "e", "text": "", "paragraphs_removed": 0, "drop_reason": None}
    # more than 2 documents: only the banner (3) goes; within_doc off keeps a's repeat, and every copy elsewhere
    out = run_with(max_docs=2, within_doc=False)
    assert out["a"]["text"] == body[0] + "\nRepeat me\nrepeat ME!" and out["d"]["paragraphs_removed"] == 0
    assert [out[k]["paragraphs_removed"] for k in "abc"] == [1, 0, 1]
    # too short after the cut: dropped with its reason; flag mode counts the same lines and changes nothing
    out = run_with(min_doc_chars=len(body[3]) + 2)
    assert out["d"]["drop_reason"] == "too_short_after_paragraphs" and out["b"]["drop_reason"] is None
    flagged = run_with(mode="flag", min_doc_chars=10**6)
    assert {k: (r["text"], r["paragraphs_removed"], r["drop_reason"]) for k, r in flagged.items()} == \
        {k: (t, n, None) for (k, t, *_), n in zip(rows, [2, 0, 1, 1, 0])}
