"""Per-document quality signals without Spark: language ID, Gopher quality/repetition, C4, FineWeb, bad input,
and the scorer interface another stage plugs into."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from jobs.quality import heuristics, langid, scorers, signals
from jobs.quality.heuristics import SignalParams

PROSE = ("The river authority reviewed the flood barrier in the morning, and the mayor said that it was safe. "
         "Later that week the public library opened a reading programme for the children of the town. ")


def test_langid_names_languages_with_scores_and_treats_newlines_as_spaces():
    langs, scores = langid.identify([PROSE, "Der Stadtrat prüfte den Jahreshaushalt am Morgen nach der Sitzung.",
                                     "東京は日本の首都であり、世界最大の都市圏の一つです。", "", "  \n "])
    assert langs[:3] == ["en", "de", "ja"] and all(s > 0.65 for s in scores[:3])
    assert langs[3:] == ["und", "und"] and scores[3:] == [0.0, 0.0]
    one, _ = langid.identify(["The council met.\nIt approved the budget.\nThe vote was close."])
    assert one == ["en"]  # fastText predicts one line: a newline must not end the text it sees
    assert langid.one_line("a\nb\n") == "a b "


def test_langid_gives_a_low_score_to_text_in_no_language():
    langs, scores = langid.identify(["qzx vbnm kjh ptq wrrr zzt xqq fhhg"])
    assert scores[0] < 0.65  # under the FineWeb floor: language_uncertain, not a confident guess


def test_gopher_quality_measures_words_symbols_bullets_and_stop_words():
    s = heuristics.signals(PROSE * 3)
    assert s["n_non_symbol_words"] == 3 * len(PROSE.split()) and 3 <= s["mean_word_length"] <= 10
    assert s["stop_words"] >= 2 and s["alpha_words_frac"] > 0.8 and s["hash_word_ratio"] == 0
    listy = heuristics.signals("\n".join(f"- item {i} ..." for i in range(10)) + "\n#tag #tag #tag")
    assert listy["bullet_lines_frac"] == pytest.approx(10 / 11)
    assert listy["ellipsis_lines_frac"] == pytest.approx(10 / 11)
    assert listy["hash_word_ratio"] > 0.05 and listy["ellipsis_word_ratio"] > 0.1


def test_gopher_repetition_matches_datatrove_formulas():
    text = "alpha beta gamma delta\nalpha beta gamma delta\nomega"
    s = heuristics.signals(text)
    assert s["dup_line_frac"] == pytest.approx(1 / 3)
    assert s["dup_line_char_frac"] == pytest.approx(len("alpha beta gamma delta") / len(text))
    # datatrove's find_all_duplicate joins the n-gram's words without spaces and skips n words after a hit
    words = ("one two three four five " * 4).split()
    assert heuristics.WordGrams(words).duplicated_chars(5) == 3 * len("onetwothreefourfive")
    assert heuristics.WordGrams("a b a b a b".split()).top_chars(2) == len("a b") * 3
    assert heuristics.WordGrams("x yy x".split()).top_chars(2) == len("x yy")   # a tie: the first seen
    assert heuristics.WordGrams(["a", "b"]).duplicated_chars(5) == 0 and heuristics.WordGrams([]).top_chars(2) == 0
    assert heuristics.find_duplicates(["x", "y", "x", "x"]) == (2, 2)
    assert heuristics.signals(PROSE)["dup_5_gram_char_frac"] == 0


def plain_top_chars(words, n):
    """datatrove's GopherRepetitionFilter top n-gram, plainly: Counter over space-joined n-grams."""
    grams = Counter(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return 0
    gram, count = grams.most_common(1)[0]
    return len(gram) * count


def plain_duplicated_chars(words, n):
    """datatrove's find_all_duplicate, plainly: a walk over every position, n words skipped after a hit."""
    grams = ["".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    unique, repeated, idx = set(), 0, 0
    while idx < len(grams):
        if grams[idx] in unique:
            repeated += len(grams[idx])
            idx += n
        else:
            unique.add(grams[idx])
            idx += 1
    return repeated


def test_numbered_ngrams_give_the_plain_walks_values_on_repetitive_text():
    rng = random.Random(7)
    for case in range(300):
        # one letter per word: datatrove's "".join can glue two different n-grams into one string; we never do
        vocabulary = [chr(ord("a") + i) * rng.randint(1, 3) for i in range(rng.choice([2, 3, 5, 20]))]
        words = [rng.choice(vocabulary) for _ in range(rng.randint(0, 80))]
        if case % 3 == 0:   # menus and boilerplate: a block of words repeated with noise between
            block = words[:12]
            words = block + words[12:30] + block + block[:7] + words
        grams = heuristics.WordGrams(words)
        for n in (2, 3, 4):
            assert grams.top_chars(n) == plain_top_chars(words, n), (words, n)
        for n in range(5, 11):
            assert grams.duplicated_chars(n) == plain_duplicated_chars(words, n), (words, n)


def test_c4_counts_kept_lines_sentences_and_whole_document_flags():
    text = ("This line has enough words. And a second sentence! A third?\n"
            "Too short\n"
            "Please enable javascript to view this page properly today.\n"
            "Read our privacy policy before you continue with us.\n"
            "function f() { return 1; } is code, not prose here.\n"
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit.")
    s = heuristics.signals(text)
    assert s["c4_curly_bracket"] == 1 and s["c4_lorem_ipsum"] == 1
    assert s["c4_lines_kept_frac"] == pytest.approx(3 / 6)   # the short, javascript and policy lines go
    assert s["c4_sentences"] == 3 + 1 + 1
    strict = heuristics.signals("no punctuation at the end of this line\nThis one ends well.",
                                SignalParams(c4_filter_no_terminal_punct=True))
    assert strict["c4_lines_kept_frac"] == 0.5


def test_c4_line_removal_keeps_the_lines_datatrove_keeps_and_counts_the_rest():
    from jobs.quality.heuristics import LineRemoval

    text = ("Otters live along the river banks.[1]\n"
            "Menu\n"
            "Please enable JavaScript to see the comments.\n"
            "We use cookies, see our privacy policy.\n"
            "a line that never ends\n"
            "Read more...\n"
            "\n"
            "The young learn to swim [citation needed] in their first summer!\n"
            + "x" * 1001 + " is not a word.")
    edited, lines, chars = heuristics.c4_remove_lines(text, LineRemoval())
    assert edited == "Otters live along the river banks.\nThe young learn to swim  in their first summer!"
    assert lines == 7 and chars == len(text) - len(edited)
    # each rule can be turned off; without the punctuation and policy rules the short ("Menu", "Read more..."),
    # javascript, blank and long-word lines go
    loose, lines, _ = heuristics.c4_remove_lines(text, LineRemoval(filter_no_terminal_punct=False, filter_policy=False))
    assert "a line that never ends" in loose and "We use cookies, see our privacy policy." in loose
    assert "Menu" not in loose and "JavaScript" not in loose and lines == 5
    assert heuristics.c4_remove_lines(None, LineRemoval()) == ("", 0, 0)
    assert heuristics.c4_remove_lines("Menu\nHome", LineRemoval()) == ("", 2, 9)   # nothing left: the job drops it


def test_fineweb_rules_measure_punctuation_short_lines_duplicates_and_lists():
    text = "Menu\nHome\nAbout us\nA long line of prose that ends with a period.\nMenu"
    s = heuristics.signals(text)
    assert s["fw_line_punct_frac"] == pytest.approx(1 / 5)
    assert s["fw_short_line_frac"] == pytest.approx(4 / 5)
    assert s["fw_dup_line_char_frac"] == pytest.approx(4 / len(text.replace("\n", "")))
    assert s["fw_newline_word_ratio"] == pytest.approx(4 / len(heuristics.words_of(text)))


def test_bad_input_is_measured_not_raised():
    empty = heuristics.signals("")
    assert empty["n_chars"] == 0 and empty["n_words"] == 0 and empty["mean_word_length"] == 0.0
    assert heuristics.signals(None)["n_chars"] == 0
    mojibake = heuristics.signals("Caf\ufffd \ufffd\ufffd\ufffd r\ufffdsum\ufffd " * 20)
    assert mojibake["replacement_char_frac"] > 0.2
    binary = heuristics.signals(bytes(range(256)).decode("latin-1") * 10)
    assert binary["control_char_frac"] > 0.05 and binary["unprintable_frac"] > 0.1
    assert heuristics.signals(PROSE)["unprintable_frac"] == 0.0


def test_score_texts_gives_every_column_one_value_per_text():
    out = signals.score_texts([PROSE, "", None], SignalParams())
    assert set(out) == set(signals.signal_columns())
    assert all(len(values) == 3 for values in out.values())
    assert out["language"] == ["en", "und", "und"] and out["pii_email"] == [0, 0, 0]


class LengthScorer:
    """A scorer as the perplexity/classifier stage writes one: the interface in jobs/quality/scorers.py."""
    name = "length"

    def columns(self):
        return {"length_score": "double", "length_lang": "string"}

    def load(self, settings, paths):
        self.scale = settings["scale"]

    def score(self, texts, languages):
        return {"length_score": [len(t) / self.scale for t in texts], "length_lang": list(languages)}


def test_enabled_scorers_run_after_langid_and_a_missing_model_names_its_job(monkeypatch, tmp_path):
    monkeypatch.setitem(scorers.SCORERS, "length", f"{__name__}:LengthScorer")
    settings = {"length": {"enabled": True, "scale": 10.0}, "other": {"enabled": False}}
    assert isinstance(LengthScorer(), scorers.Scorer)
    assert scorers.enabled_scorers(settings) == ["length"]
    assert signals.signal_columns(settings)["length_score"] == "double"
    out = signals.score_texts(["abcdefghij", PROSE], SignalParams(), scorers.LoadedScorers(settings, None))
    assert out["length_score"][0] == 1.0 and out["length_lang"] == out["language"]
    with pytest.raises(scorers.ScorerError, match="no scorer is registered under 'nope'"):
        scorers.scorer_class("nope")
    with pytest.raises(scorers.ScorerError, match="train it with `python -m jobs.quality.train_kenlm`"):
        scorers.require_model("perplexity", str(tmp_path / "kenlm.bin"), "python -m jobs.quality.train_kenlm")


class CountingScorer(LengthScorer):
    """LengthScorer that remembers how many texts it was asked to score."""
    name = "counting"
    seen: list[int] = []

    def columns(self):
        return {"counting_score": "double"}

    def score(self, texts, languages):
        CountingScorer.seen.append(len(texts))
        return {"counting_score": [len(t) / self.scale for t in texts]}


def test_rescore_recomputes_only_the_stale_groups_of_each_row(monkeypatch):
    monkeypatch.setitem(scorers.SCORERS, "counting", f"{__name__}:CountingScorer")
    CountingScorer.seen = []
    settings = {"counting": {"enabled": True, "scale": 1.0}}
    loaded, params = scorers.LoadedScorers(settings, None), SignalParams()
    texts = [PROSE, PROSE + " More.", "Bonjour tout le monde, comment allez-vous aujourd'hui ?"]
    empty = {column: [None] * 3 for column in signals.table_columns(settings)
             if column not in ("doc_id", "content_sha256")}

    first = signals.rescore(texts, empty, params, loaded, "base-1", {"counting": "c-1"})
    assert CountingScorer.seen == [3] and first["signals_sha256"] == ["base-1"] * 3
    assert first["counting_sha256"] == ["c-1"] * 3 and first["language"][0] == "en"

    CountingScorer.seen = []
    assert signals.rescore(texts, first, params, loaded, "base-1", {"counting": "c-1"}) == first
    assert CountingScorer.seen == []                       # all current: nothing runs

    stale = {**first, "counting_sha256": ["c-1", "old", None], "counting_score": [1.0, 2.0, None]}
    stale["n_words"] = [-1, -1, -1]                        # base values are carried over, never recomputed here
    second = signals.rescore(texts, stale, params, loaded, "base-1", {"counting": "c-1"})
    assert CountingScorer.seen == [2] and second["counting_score"] == [1.0, first["counting_score"][1],
                                                                       first["counting_score"][2]]
    assert second["n_words"] == [-1, -1, -1] and second["counting_sha256"] == ["c-1"] * 3

    CountingScorer.seen = []
    moved = {**first, "signals_sha256": ["base-1", "base-0", "base-1"], "language": ["en", "xx", "fr"]}
    third = signals.rescore(texts, moved, params, loaded, "base-1", {"counting": "c-1"})
    assert CountingScorer.seen == [1] and third["language"][1] == "en"   # a stale base row is scored whole
    assert third["signals_sha256"] == ["base-1"] * 3


def test_each_scorer_gets_a_hash_column_and_the_filter_view_leaves_them_out(monkeypatch):
    monkeypatch.setitem(scorers.SCORERS, "length", f"{__name__}:LengthScorer")
    columns = signals.table_columns({"length": {"enabled": True, "scale": 1.0}})
    assert list(columns)[:3] == ["doc_id", "content_sha256", "signals_sha256"] and columns["length_sha256"] == "string"
    assert signals.state_columns(columns) == ["signals_sha256", "length_sha256"]
    monkeypatch.setattr(LengthScorer, "columns", lambda self: {"language": "string"})
    with pytest.raises(ValueError, match=r"keys, base signals or hashes: \['language'\]"):
        signals.table_columns({"length": {"enabled": True, "scale": 1.0}})
    assert signals.scorer_dependencies({"length": {"enabled": True, "scale": 1.0}}, None) == {
        "length": {"version": signals.SIGNATURE_VERSION, "settings": {"enabled": True, "scale": 1.0}, "model": ""}}


def test_rules_and_routing_that_do_not_meet_are_named():
    """A rule whose group no language routes to applies to no document (seen: a rule added in a group 'test' kept
    every document, without a word); a misspelt group in a language's routing leaves that group's rules off.  The
    quality job warns with these lists and puts them in its metrics."""
    from jobs.config import load_jobs_config
    from jobs.quality.filters import routing_gaps
    assert routing_gaps(load_jobs_config().quality) == {"rules_routed_to_no_language": [],
                                                        "routed_groups_without_rules": []}
    misspelt = load_jobs_config(
        ["quality.routing.per_language.en.groups=[bad_input, gopher_qualty, gopher_stop_words]"])
    assert routing_gaps(misspelt.quality) == {"rules_routed_to_no_language": [],
                                              "routed_groups_without_rules": ["gopher_qualty"]}
    added = load_jobs_config(["quality.filters=[{reason: huge_only, group: test, column: n_chars, min: 1000000}]"])
    assert routing_gaps(added.quality) == {
        "rules_routed_to_no_language": ["huge_only"],
        "routed_groups_without_rules": ["bad_input", "fineweb", "gopher_quality", "gopher_repetition",
                                        "gopher_stop_words"]}
