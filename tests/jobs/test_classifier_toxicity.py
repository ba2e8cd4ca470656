"""The toxicity scorer: C4-style word-list ratios from glin-profanity's 24 lists (phrases, other languages,
unsegmented scripts) and alt-profanity-check's offline English classifier."""
from __future__ import annotations

import pytest

from jobs.quality.classifiers import Lexicon, ToxicityScorer, count_listed_words, toxic_words, word_list
from jobs.quality.scorers import make_scorer


def test_lists_ship_for_24_languages():
    from jobs.quality.classifiers import WORD_LISTS

    assert len(set(WORD_LISTS.values())) == 24
    assert all(word_list(code) for code in WORD_LISTS)
    assert word_list("sw") == frozenset()                      # Swahili: no list of its own


def test_ratio_counts_words_and_phrases_once():
    assert toxic_words("The otter swims near the old bridge.", "en") == (0, 0.0)
    # "shit" (a word) and "2 girls 1 cup" (a phrase of 4 words) cover 5 of 9 words; punctuation is stripped
    assert toxic_words("Well, shit! that 2 girls 1 cup video again", "en") == (5, 5 / 9)
    assert count_listed_words("a b c d b".split(), Lexicon.of(frozenset({"b c", "b"}))) == 3   # the longest match wins
    assert toxic_words("", "en") == (0, 0.0) and toxic_words("  \n ", "de") == (0, 0.0)


def test_each_language_uses_its_own_list_plus_english():
    french = "Quel bordel, ce film est nul et le scénario aussi"
    assert toxic_words(french, "fr")[0] == 1
    assert toxic_words(french, "de")[0] == 0                   # "bordel" is not on the German or English list
    assert toxic_words("Das ist ein Arschloch und das ist shit", "de") == (2, 2 / 8)
    assert toxic_words("habari yako, shit happens", "sw") == (1, 0.25)   # no Swahili list: English words only


def test_unsegmented_scripts_are_matched_by_characters():
    n, ratio = toxic_words("这是三级片网站", "zh")         # 7 characters, 三级片 is listed (3 characters)
    assert n == 1 and ratio == pytest.approx(3 / 7)
    assert toxic_words("今天天气很好", "zh") == (0, 0.0)


def test_scorer_columns_and_the_english_classifier():
    scorer = make_scorer("toxicity")
    assert isinstance(scorer, ToxicityScorer)
    scorer.load({"classifier_languages": ["en"], "max_chars": 1000}, paths=None)
    texts = ["You are a stupid fucking idiot and I hate you", "The otter swims near the old bridge every morning.",
             "Quel bordel, ce film est nul", ""]
    out = scorer.score(texts, ["en", "en", "fr", "en"])
    assert set(out) == set(scorer.columns()) == {"toxic_words", "toxic_words_ratio", "toxicity_prob"}
    assert out["toxic_words"] == [1, 0, 1, 0]
    assert out["toxicity_prob"][0] > 0.9 and out["toxicity_prob"][1] < 0.2
    assert out["toxicity_prob"][2:] == [None, None]           # French: word list only; empty text: nothing to classify
