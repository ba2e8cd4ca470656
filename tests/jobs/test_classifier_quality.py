"""The DCLM-style fastText quality classifier: trained by our job on reference text against crawl text, held-out
precision/recall printed and stored, `quality_prob` from the scorer, a missing model named with its command; then the
quality job on real Spark + Delta with all three of our scorers (perplexity, toxicity, quality_classifier) enabled,
the classifier's negatives read from silver.documents."""
from __future__ import annotations

import json
import random

import pytest

from jobs.quality import train_classifier, train_kenlm
from jobs.quality.scorers import ScorerError, make_scorer
from localweb.text import TextGenerator

SETTINGS = {"max_docs": 1000, "heldout_fraction": 0.2, "seed": 0, "lr": 0.1, "dim": 20, "epoch": 25,
            "word_ngrams": 2, "bucket": 2000000, "min_count": 1, "threshold": 0.5, "threads": 1}
# fastText's default bucket: with 20,000 rows the training diverged (NaN) inside the whole suite, not alone
SPAM = ["buy", "cheap", "click", "here", "login", "register", "free", "shipping", "casino", "bonus", "deal", "price",
        "cart", "subscribe", "newsletter", "cookie", "accept", "offer", "limited", "now", "best", "online", "sale"]


def reference(seed: int) -> str:
    gen = TextGenerator("en", random.Random(seed))
    return "\n".join(gen.paragraph(3, 5) for _ in range(3))


def crawl(seed: int) -> str:
    """Navigation, shop and spam lines with a little prose: what random crawl looks like next to Wikipedia."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(SPAM) for _ in range(rng.randint(3, 9))).capitalize() for _ in range(8)]
    if rng.random() < 0.3:
        lines.insert(rng.randrange(len(lines)), TextGenerator("en", rng).sentence())
    return "\n".join(lines)


def jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    dest = tmp_path_factory.mktemp("models") / "quality_classifier"
    meta = train_classifier.train([reference(i) for i in range(150)], [crawl(i) for i in range(200)], str(dest),
                                  SETTINGS, {"positives": "generated", "negatives": "generated"})
    return dest, meta


def test_training_balances_holds_out_and_measures(trained):
    dest, meta = trained
    assert sorted(p.name for p in dest.iterdir()) == ["model.bin", "model.json"]
    assert json.loads((dest / "model.json").read_text()) == meta
    held = meta["heldout"]
    assert meta["train_docs_per_class"] == 120                       # 150 per class (the larger side sampled down), 20 % held out
    assert held["positives"] == held["negatives"] == 30
    assert held["precision"] >= 0.9 and held["recall"] >= 0.9 and held["roc_auc"] >= 0.95


def test_heldout_metrics_are_scikit_learns_definitions():
    m = train_classifier.heldout_metrics([0.9, 0.8, 0.4, 0.7, 0.2, 0.1], [True, True, True, False, False, False], 0.5)
    assert (m["precision"], m["recall"]) == (pytest.approx(2 / 3, abs=1e-4), pytest.approx(2 / 3, abs=1e-4))


def test_scorer_gives_the_positive_probability(trained, tmp_path):
    dest, _ = trained
    scorer = make_scorer("quality_classifier")
    scorer.load({"model_dir": str(dest)}, paths=None)
    out = scorer.score([reference(1000), crawl(1000), "", reference(1001)], ["en", "en", "en", "de"])
    assert list(out) == list(scorer.columns()) == ["quality_prob"]
    probs = out["quality_prob"]
    assert probs[0] > 0.8 and probs[1] < 0.2 and probs[2] is None and probs[3] > 0.8
    assert all(0.0 <= p <= 1.0 for p in probs if p is not None)


def test_missing_model_names_the_training_command(tmp_path):
    from conf.paths import load_paths

    paths = load_paths([f"var={tmp_path}"])
    with pytest.raises(ScorerError, match=r"python -m jobs\.quality\.train_classifier"):
        make_scorer("quality_classifier").load({}, paths)
    with pytest.raises(ValueError, match="too few documents"):
        train_classifier.train(["a b"] * 3, ["c d"] * 10, str(tmp_path / "m"), SETTINGS, {})


def test_the_cli_prints_heldout_precision_and_recall(tmp_path, capsys):
    pos = jsonl(tmp_path / "wiki.jsonl", [reference(i) for i in range(60)])
    neg = jsonl(tmp_path / "crawl.jsonl", [crawl(i) for i in range(60)])
    assert train_classifier.main(["--positives", str(pos), "--negatives", str(neg),
                                  "-o", f"paths.var={tmp_path / 'var'}", "-o", "quality.scorers.quality_classifier.train.dim=20", "-o", "quality.scorers.quality_classifier.train.epoch=25"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("held-out: precision ") and " recall " in lines[0]
    printed = json.loads(lines[-1])
    assert printed["model"] == str(tmp_path / "var" / "lake" / "models" / "quality_classifier")
    assert printed["heldout"]["positives"] == 6 and printed["negatives"] == str(neg)


def test_quality_job_runs_our_scorers_with_negatives_from_silver(spark, tmp_path):
    from pyspark.sql import functions as F

    from jobs.quality.job import QualityJob

    lake = tmp_path / "lake"
    docs = {f"wiki-{i}": reference(500 + i) for i in range(3)}
    docs.update({f"crawl-{i}": crawl(500 + i) for i in range(40)})
    docs["rude"] = reference(600) + "\nWhat a load of shit, you stupid idiot."
    (spark.createDataFrame(list(docs.items()), "doc_id string, text string")
     .withColumn("url", F.concat(F.lit("http://"), "doc_id", F.lit(".test/"))).withColumn("host", F.lit("x.test"))
     .withColumn("fetch_time", F.current_timestamp()).withColumn("title", F.lit(None).cast("string"))
     .withColumn("language", F.lit("und")).withColumn("n_chars", F.length("text"))
     .withColumn("warc_file", F.lit("f.warc.gz")).withColumn("warc_offset", F.lit(0).cast("long"))
     .withColumn("content_sha256", F.sha2("text", 256))
     .write.format("delta").save(str(lake / "silver" / "documents")))
    # the classifier's negatives: a seeded sample of the crawl table that Spark wrote, read with delta-rs
    positives = jsonl(tmp_path / "wiki.jsonl", [reference(i) for i in range(40)])
    small = ["-o", "quality.scorers.quality_classifier.train.dim=20",
             "-o", "quality.scorers.quality_classifier.train.epoch=25"]
    train = ["--positives", str(positives), "--negatives", "table:silver.documents", "--language", "und",
             "-o", f"paths.lake={lake}", *small]
    assert train_classifier.main(train) == 0
    meta = json.loads((lake / "models" / "quality_classifier" / "model.json").read_text())
    assert meta["negatives"] == "table:silver.documents" and meta["train_docs_per_class"] == 36
    kenlm_corpus = jsonl(tmp_path / "ref.jsonl", [reference(i) for i in range(80)])
    train_kenlm.main(["--language", "en", "--corpus", str(kenlm_corpus), "-o", f"paths.lake={lake}",
                      "-o", "quality.scorers.perplexity.train.vocab_size=300",
                      "-o", "quality.scorers.perplexity.train.memory=100M"])

    on = [f"quality.scorers.{name}.enabled=true" for name in ("perplexity", "toxicity", "quality_classifier")]
    args = ["--lake", str(lake)]
    for o in on:
        args += ["-o", o]
    assert QualityJob().run(args).status == "ok"
    signals = {r["doc_id"]: r for r in spark.read.format("delta").load(str(lake / "silver" / "signals")).collect()}
    assert len(signals) == len(docs)
    wiki, junk, rude = signals["wiki-0"], signals["crawl-0"], signals["rude"]
    assert wiki["language"] == "en" and wiki["quality_prob"] > 0.5 > junk["quality_prob"]
    assert wiki["perplexity"] is not None and wiki["perplexity_bucket"] in {"head", "middle", "tail"}
    assert rude["toxic_words"] == 1 and rude["toxicity_prob"] > wiki["toxicity_prob"]
    assert wiki["toxic_words_ratio"] == 0.0

    # retrained (another seed): the job sees a new model and rescores its column alone
    assert train_classifier.main([*train, "-o", "quality.scorers.quality_classifier.train.seed=1"]) == 0
    rescored = QualityJob().run(args)
    assert rescored.extra["signals_computed"] == 0
    assert rescored.extra["scorers_computed"] == {"perplexity": 0, "quality_classifier": len(docs), "toxicity": 0}
    after = {r["doc_id"]: r for r in spark.read.format("delta").load(str(lake / "silver" / "signals")).collect()}
    assert after["wiki-0"]["quality_classifier_sha256"] != wiki["quality_classifier_sha256"]
    assert after["wiki-0"]["perplexity"] == wiki["perplexity"]
    assert after["rude"]["toxicity_prob"] == rude["toxicity_prob"]
