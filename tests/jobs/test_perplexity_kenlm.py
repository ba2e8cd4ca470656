"""CCNet's perplexity recipe with the real lmplz/build_binary (make kenlm): normalization, training on a tiny
generated corpus, in-domain text against gibberish, buckets by the stored cut-offs, the scorer, a missing model."""
from __future__ import annotations

import json
import random

import pytest

from conf.paths import load_paths
from jobs.quality import perplexity as ppl
from jobs.quality import train_kenlm
from jobs.quality.scorers import ScorerError

NOUNS = ["otter", "river", "heron", "valley", "forest", "village", "farmer", "bridge", "meadow", "stone"]
VERBS = ["crosses", "watches", "follows", "reaches", "finds", "leaves", "guards", "paints"]
ADJECTIVES = ["old", "quiet", "green", "small", "northern", "wide", "early", "bright"]

SETTINGS = {"max_docs": 1000, "seed": 0, "heldout_fraction": 0.2, "cutoff_docs": 1000, "percentiles": [30, 60],
            "vocab_size": 200, "sp_model_type": "unigram", "character_coverage": 1.0, "sp_max_lines": 100000,
            "order": 5, "prune": [], "memory": "100M", "threads": 1, "tools_dir": "", "per_line": False}


def sentence(rng: random.Random) -> str:
    return (f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} the "
            f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} in {rng.randint(1900, 2020)}.")


def document(rng: random.Random, lines: int = 4) -> str:
    return "\n".join(" ".join(sentence(rng) for _ in range(3)) for _ in range(lines))


def gibberish(rng: random.Random, words: int = 40) -> str:
    return " ".join("".join(rng.choice("qxzjvkwpfgh") for _ in range(rng.randint(3, 9))) for _ in range(words))


def crawl_page(rng: random.Random, noise: float) -> str:
    """An in-domain document with a share `noise` of its words replaced by gibberish: a spread of perplexities."""
    return " ".join(gibberish(rng, 1) if rng.random() < noise else w for w in document(rng).split(" "))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    rng = random.Random(1)
    corpus = tmp_path_factory.mktemp("corpus") / "reference.jsonl"
    corpus.write_text("".join(json.dumps({"text": document(rng), "language": "en"}) + "\n" for _ in range(300))
                      + "not json\n" + json.dumps({"text": document(rng), "language": "fr"}) + "\n")
    crawl = corpus.parent / "crawl.jsonl"       # the cut-offs come from the crawl's perplexities, as in CCNet
    crawl.write_text("".join(json.dumps({"text": crawl_page(rng, rng.uniform(0, 0.6))}) + "\n" for _ in range(200)))
    dest = tmp_path_factory.mktemp("models") / "kenlm" / "en"
    meta = train_kenlm.train("en", str(corpus), str(dest), SETTINGS, cutoff_source=str(crawl))
    return dest, meta


def test_normalize_follows_ccnet():
    assert ppl.normalize("  Héllo WÖRLD 2024 ") == "hello world 0000"
    assert ppl.normalize("«Ça va？» — ok…") == '"ca va?"  -  ok...'   # cc_net maps — to " - "
    assert ppl.normalize("a\tb\x00c\u0085d") == "abcd"              # control characters removed
    assert ppl.normalize("   ") == ""
    assert ppl.normalize("naïve café résumé") == "naive cafe resume"


def test_perplexity_formula_and_buckets():
    assert ppl.perplexity(-4.0, 2) == pytest.approx(100.0)
    cut = (100.0, 200.0)
    assert [ppl.bucket(v, cut) for v in (50.0, 100.0, 150.0, 200.0, 900.0)] == ["head", "middle", "middle", "tail", "tail"]
    assert ppl.bucket(None, cut) == ppl.EMPTY
    assert ppl.bucket(10.0, None) == ppl.NO_MODEL


def test_training_writes_the_model_and_its_cutoffs(model_dir):
    dest, meta = model_dir
    assert {p.name for p in dest.iterdir()} == {ppl.SP_FILE, ppl.LM_FILE, ppl.META_FILE}
    stored = json.loads((dest / ppl.META_FILE).read_text())
    assert stored["order"] == 5 and stored["language"] == "en"
    assert stored["skipped"] == {"bad_json": 1, "other_language": 1}           # counted, not fatal
    assert stored["documents"] == 300
    cut = stored["cutoffs"]
    assert 0 < cut["head"] < cut["tail"] and cut["percentiles"] == [30, 60] and cut["documents"] == 200
    assert cut["source"].endswith("crawl.jsonl")


def test_in_domain_text_has_lower_perplexity_than_gibberish(model_dir):
    dest, _ = model_dir
    model = ppl.load_language_model(dest, "en")
    rng = random.Random(99)
    in_domain = [model.score(document(rng)) for _ in range(5)]
    noise = [model.score(gibberish(rng)) for _ in range(5)]
    assert max(in_domain) * 5 < min(noise)
    shuffled = " ".join(random.Random(3).sample(document(rng).split(), 40))   # same words, no grammar
    assert model.score(document(rng)) < model.score(shuffled)
    assert model.score("") is None and model.score("\n \n") is None


def test_a_document_is_scored_as_cc_net_mine_scores_it(model_dir):
    """cc_net mine.py: MultiSentencePiece(normalize=True) over the whole raw_content, then DocLM over the pieces;
    normalizing deletes the newlines, so the document is one KenLM sentence (pieces + one </s>)."""
    dest, _ = model_dir
    model = ppl.load_language_model(dest, "en")
    text = document(random.Random(7), lines=3)
    assert ppl.normalize(text).count("\n") == 0 and ppl.normalize("one.\nTwo") == "one.two"
    pieces = model.sp.encode_as_pieces(ppl.normalize(text))
    expected = round(10 ** (-model.lm.score(" ".join(pieces)) / (len(" ".join(pieces).split()) + 1)), 1)
    assert model.score(text) == expected == model.score(text, per_line=False)
    by_line = [model.sp.encode_as_pieces(ppl.normalize(line)) for line in text.split("\n")]
    pooled = sum(model.lm.score(" ".join(p)) for p in by_line) / sum(len(p) + 1 for p in by_line)
    assert model.score(text, per_line=True) == round(10 ** -pooled, 1) != expected


def test_unicode_punctuation_and_digits_follow_cc_net_tests():
    # cc_net tests/test_normalizer.py's cases through the whole normalize: digits go to 0 before the punctuation
    # table, so the full-width "１" that replace_unicode_punct alone maps to '"' becomes "0", as in cc_net's normalize
    assert ppl.normalize("，。、„”“«»１」「《》´∶：？！（）；–—．～’…━〈〉【】％") == ',.,"""""0""""\'::?!();- - . ~\'...-<>[]%'
    assert ppl.normalize("０２３４５６７８９ | 0123456789") == "000000000 | 0000000000"


def test_buckets_come_from_the_stored_cutoffs(model_dir):
    dest, meta = model_dir
    model = ppl.load_language_model(dest, "en")
    head, tail = model.cutoffs
    assert (head, tail) == (meta["cutoffs"]["head"], meta["cutoffs"]["tail"])
    rng = random.Random(5)
    values = [model.score(crawl_page(rng, rng.uniform(0, 0.6))) for _ in range(300)]   # more of the same crawl
    shares = {b: sum(ppl.bucket(v, model.cutoffs) == b for v in values) / len(values) for b in ("head", "middle", "tail")}
    assert 0.2 < shares["head"] < 0.4 and 0.2 < shares["middle"] < 0.4 and 0.3 < shares["tail"] < 0.5
    assert ppl.bucket(model.score(document(rng)), model.cutoffs) == "head"
    assert ppl.bucket(model.score(gibberish(rng)), model.cutoffs) == "tail"


def test_scorer_columns_languages_and_missing_models(model_dir, tmp_path):
    dest, _ = model_dir
    paths = load_paths([f"var={tmp_path}"])
    scorer = ppl.PerplexityScorer()
    scorer.load({"model_dir": str(dest.parent)}, paths)
    rng = random.Random(7)
    out = scorer.score([document(rng), gibberish(rng), document(rng), ""], ["en", "en", "de", "en"])
    assert set(out) == set(scorer.columns()) == {"perplexity", "perplexity_bucket"}
    assert out["perplexity"][0] < out["perplexity"][1] and out["perplexity"][2] is None and out["perplexity"][3] is None
    assert out["perplexity_bucket"][1] == "tail" and out["perplexity_bucket"][2:] == [ppl.NO_MODEL, ppl.EMPTY]

    with pytest.raises(ScorerError, match="python -m jobs.quality.train_kenlm --language en"):
        ppl.PerplexityScorer().load({}, paths)                           # nothing under <lake>/models/kenlm
    with pytest.raises(ScorerError, match="train_kenlm --language fr"):
        ppl.PerplexityScorer().load({"model_dir": str(dest.parent), "languages": ["en", "fr"]}, paths)


def test_the_identity_names_each_language_model_and_changes_when_one_is_retrained(model_dir, tmp_path):
    import shutil

    dest, meta = model_dir
    root = tmp_path / "kenlm"
    shutil.copytree(dest, root / "en")
    scorer = ppl.PerplexityScorer()
    first = scorer.identity({"model_dir": str(root)}, None)
    assert first.startswith("en:") and len(first) == len("en:") + 64
    shutil.copytree(dest, root / "de")                                   # a second trained language joins
    assert scorer.identity({"model_dir": str(root)}, None) == f"de:{first[3:]},{first}"
    assert scorer.identity({"model_dir": str(root), "languages": ["en"]}, None) == first
    # retrained (same corpus and settings): model.json records a new run, so the stored perplexities are stale
    train_kenlm.train("en", meta["corpus"], str(root / "en"), SETTINGS, cutoff_source=meta["cutoffs"]["source"])
    assert scorer.identity({"model_dir": str(root), "languages": ["en"]}, None) != first


def test_the_cli_trains_into_the_lake_models_area(tmp_path, capsys):
    rng = random.Random(2)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n\n".join(document(rng, 1) for _ in range(200)))
    assert train_kenlm.main(["--language", "xx", "--corpus", str(corpus), "-o", f"paths.var={tmp_path / 'var'}",
                             "-o", "quality.scorers.perplexity.train.vocab_size=150",
                             "-o", "quality.scorers.perplexity.train.memory=100M"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["model"] == str(tmp_path / "var" / "lake" / "models" / "kenlm" / "xx")
    # 200 paragraphs of a .txt file -> 10 documents of 20 lines; 10 % of them held out to set the cut-offs
    assert printed["documents"] == 9 and printed["lines"] == 180
    assert printed["cutoffs"]["documents"] == 1 and printed["cutoffs"]["source"].startswith("held-out")
    assert ppl.load_language_model(printed["model"], "xx").score(document(rng)) > 1.0


def test_missing_lmplz_names_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(train_kenlm.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(FileNotFoundError, match="make kenlm"):
        train_kenlm.find_tool("lmplz")


def test_models_on_object_storage_are_published_and_read_through_the_cache(s3, tmp_path):
    from jobs.quality import classifiers, train_classifier

    rng = random.Random(11)
    corpus = tmp_path / "ref.jsonl"
    corpus.write_text("".join(json.dumps({"text": document(rng)}) + "\n" for _ in range(60)))
    train_kenlm.train("en", str(corpus), f"{s3}/models/kenlm/en", SETTINGS)
    paths = load_paths([f"var={tmp_path / 'var'}"])
    scorer = ppl.PerplexityScorer()
    scorer.load({"model_dir": f"{s3}/models/kenlm"}, paths)             # listed, copied to paths.cache_dir, loaded
    assert list(scorer.models) == ["en"]
    assert (tmp_path / "var" / "cache" / "kenlm").is_dir()
    assert scorer.score([document(rng)], ["en"])["perplexity"][0] < scorer.score([gibberish(rng)], ["en"])["perplexity"][0]

    texts = [document(rng) for _ in range(60)], [gibberish(rng) for _ in range(60)]
    settings = {"max_docs": 100, "heldout_fraction": 0.2, "seed": 0, "lr": 0.1, "dim": 20, "epoch": 25,
                "word_ngrams": 2, "bucket": 2000000, "min_count": 1, "threshold": 0.5, "threads": 1}
    # fastText's default bucket: with 20,000 rows the training diverged (NaN) inside the whole suite, not alone
    train_classifier.train(*texts, f"{s3}/models/quality_classifier", settings, {})
    quality = classifiers.QualityClassifierScorer()
    quality.load({"model_dir": f"{s3}/models/quality_classifier"}, paths)
    assert quality.score([document(rng)], ["en"])["quality_prob"][0] > 0.5
