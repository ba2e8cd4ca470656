"""The per-document dedup functions, without Spark: normalization, shingles, signatures, bands, survivors."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs.dedup import minhash
from jobs.dedup.components import choose_survivors
from jobs.dedup.contamination import cut_text
from jobs.dedup.normalize import normalize_texts, normalized_text, word_hashes_of_batch, words_of, words_of_batch


def letter_words(rng: random.Random, n: int) -> list[str]:
    """Made-up words of letters only (digits would all fold to 0)."""
    return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(n)]


def shingle_sets(texts, n=5):
    words, offsets = words_of_batch(pa.array(texts, pa.large_string()))
    hashes, offs = minhash.shingle_hashes(minhash.word_hashes(words), offsets, n)
    return minhash.unique_sets(hashes, offs)


def python_jaccard(a: str, b: str, n=5) -> float:
    def grams(t):
        w = words_of(t)
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)} if len(w) >= n else {tuple(w)}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def random_text(rng: random.Random, words: int) -> str:
    vocab = letter_words(random.Random(0), 3000)
    return " ".join(rng.choice(vocab) for _ in range(words))


def test_normalization_drops_case_accents_punctuation_and_folds_digits():
    assert words_of("Héllo, WÖRLD! It's 2025-11-26.") == ["hello", "world", "it", "s", "0000", "00", "00"]
    assert normalized_text("Crème   brûlée\n\n— 3 €") == "creme brulee 0"
    assert words_of("") == [] and words_of("!!! ... ???") == []


def test_cjk_text_is_split_into_characters_not_collapsed():
    words = words_of("日本語のテキストです。中文文本没有空格")
    assert words[:4] == ["日", "本", "語", "の"] and len(words) == 18
    (sets,) = [shingle_sets(["日本語のテキストです。中文文本没有空格"])]
    assert sets[0].size == 14  # 18 characters -> 14 character 5-grams


def test_the_fast_ascii_path_gives_the_same_words_as_the_unicode_path():
    texts = ["Plain ASCII, with punctuation: yes! 42", "Ünïcödé “quotes” and ﬁligatures ½", "mixed ascii — naïve",
             "", "tabs\tand\nnewlines", "Straße 東京 x_y a+b", "¹²³ ４５６"]
    fast, _ = words_of_batch(pa.array(texts, pa.large_string()))
    slow = pc.list_flatten(pc.utf8_split_whitespace(normalize_texts(pa.array(texts, pa.large_string()))))
    assert fast.to_pylist() == [w.strip() for w in slow.to_pylist() if w.strip()]


def test_a_batch_gives_each_text_the_words_it_gets_alone():
    """Regression: Arrow's string kernels read past an unpadded buffer's end, and its split can return a
    trailing run of spaces as a word; both once gave the last word of a text stray bytes, at random."""
    rng = random.Random(4)
    pieces = ["word", "Salesforce®", "industry—and", "naïve", "end.", "x", "1,000", "東京", "“quoted”", "a+b"]
    texts = [" ".join(rng.choice(pieces) for _ in range(rng.randrange(1, 40))) for _ in range(300)]
    for _ in range(3):
        words, offsets = words_of_batch(pa.array(texts, pa.large_string()))
        flat = words.to_pylist()
        for i, text in enumerate(texts):
            alone = words_of(text)
            assert flat[offsets[i]:offsets[i + 1]] == alone
            assert all(w and not any(c.isspace() for c in w) for w in alone)


def test_shingle_jaccard_equals_the_jaccard_of_word_tuples():
    rng = random.Random(1)
    base = random_text(rng, 300)
    words = base.split()
    edited = " ".join(words[:100] + words[130:] + ["inserted", "words", "here"])
    a, b = shingle_sets([base, edited])
    assert minhash.jaccard(a, b) == pytest.approx(python_jaccard(base, edited), abs=1e-12)


def test_short_texts_get_one_shingle_and_empty_texts_none():
    sets = shingle_sets(["one", "two words", "", "a b c d e f"])
    assert [s.size for s in sets] == [1, 1, 0, 2]
    # a short text's shingle is not the first n-gram of a longer text that starts the same way
    assert not np.intersect1d(shingle_sets(["a b c"])[0], shingle_sets(["a b c d e"])[0]).size


def test_giant_repeated_line_has_few_distinct_shingles():
    line = "Buy cheap watches online today best prices guaranteed"
    (s,) = shingle_sets(["\n".join([line] * 5000)])
    assert 0 < s.size <= 8


def test_hashes_are_the_same_in_another_process():
    text = "the same text must hash the same on every executor and in every run"
    words, offsets = words_of_batch(pa.array([text], pa.large_string()))
    here = minhash.shingle_hashes(minhash.word_hashes(words), offsets, 5)[0].tolist()
    code = ("import json, pyarrow as pa; from jobs.dedup import minhash; from jobs.dedup.normalize import words_of_batch;"
            f"w, o = words_of_batch(pa.array([{text!r}], pa.large_string()));"
            "print(json.dumps(minhash.shingle_hashes(minhash.word_hashes(w), o, 5)[0].tolist()))")
    there = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout)
    assert here == there


def test_signature_estimates_jaccard_and_bands_match_for_equal_signatures():
    rng = random.Random(2)
    base = random_text(rng, 800)
    words = base.split()
    edited = " ".join(words[:300] + words[340:])
    words_arr, offsets = words_of_batch(pa.array([base, edited], pa.large_string()))
    hashes, offs = minhash.shingle_hashes(minhash.word_hashes(words_arr), offsets, 5)
    sigs = minhash.signatures(hashes, offs, 256, seed=1)
    assert sigs.shape == (2, 256) and sigs.dtype == np.uint32
    exact = python_jaccard(base, edited)
    assert abs(minhash.estimated_jaccard(sigs[0], sigs[1]) - exact) < 0.1
    bands = minhash.band_hashes(sigs, 20, 6)
    assert bands.shape == (2, 20) and (bands >= 0).all()
    same = minhash.band_hashes(np.vstack([sigs[0], sigs[0]]), 20, 6)
    assert (same[0] == same[1]).all()
    with pytest.raises(ValueError, match="need 300 permutations"):
        minhash.band_hashes(sigs, 50, 6)


def test_s_curve_of_the_default_bands_targets_jaccard_0_8():
    from jobs.config import load_jobs_config

    cfg = load_jobs_config().dedup.minhash
    assert minhash.candidate_probability(0.8, cfg.bands, cfg.rows) > 0.99
    assert minhash.candidate_probability(0.3, cfg.bands, cfg.rows) < 0.05
    curve = minhash.s_curve(cfg.bands, cfg.rows)
    assert "0.80" in curve and "knee" in curve


def test_survivor_rule_keeps_both_ends_of_a_non_transitive_chain():
    # A~B and B~C but not A~C: dropping B (survivor A) leaves C with no kept duplicate, so C is kept
    survivors = choose_survivors(["A", "B", "C"], [("A", "B"), ("B", "C")])
    assert survivors == {"A": None, "B": "A", "C": None}


def test_survivor_rule_follows_priority_and_names_a_kept_neighbour():
    survivors = choose_survivors(["C", "A", "B", "D"], [("A", "B"), ("B", "C"), ("C", "D"), ("A", "D")])
    assert survivors["C"] is None and survivors["B"] == "C" and survivors["D"] == "C" and survivors["A"] is None
    kept = {m for m, s in survivors.items() if s is None}
    assert all(s in kept for s in survivors.values() if s)


def test_contamination_cut_removes_the_hit_and_its_surroundings():
    rng = random.Random(3)
    before, after = random_text(rng, 200), random_text(rng, 200)
    passage = "the quick brown fox jumps over the lazy dog near the river bank at dawn"
    text = before + " " + passage + " " + after
    hit = len(words_of(before))
    cut, splits = cut_text(text, [hit], 13, cut_chars=200, min_fragment_chars=200, max_splits=10)
    assert splits == 1 and "quick brown fox" not in cut
    assert cut.startswith(before[:100]) and cut.endswith(after[-100:])
    assert cut_text(text, [hit], 13, 200, 200, max_splits=0) == (None, 1)


MIXED = ["Ünïcödé “quotes” ﬁligatures ½ ¼ ™ ℃ … ″ ㎒ Ⅻ ①②", "한국어 텍스트는 띄어쓰기를 합니다 대한민국",
         "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "हिन्दी में लिखा गया पाठ, और अंक ०१२३", "النص العربي ٠١٢٣ مع أرقام",
         "ＦＵＬＬ－ＷＩＤＴＨ ａｂｃ １２３", "Ελληνικά ΚΕΦΑΛΑΙΑ ά έ", "Кириллица Ёё ЙЙ", "ȺȺ ǅ ǈ İstanbul ß ẞ",
         "zero\u200bwidth soft\u00adhyphen nbsp\u00a0space e\u0301\u0302 x\u20dd", "emoji 😀👍🏽 tags 🏳️‍🌈 ok",
         "日本語のテキストです。中文文本没有空格 ｶﾀｶﾅ"]


def test_the_compiled_scan_gives_the_words_of_the_reference_normalization():
    """The code-point table + scan against `normalize_texts` (Arrow regexes, the definition), on many
    scripts and on characters that expand into several (ligatures, fractions, ™, Hangul syllables)."""
    rng = random.Random(6)
    pieces = [w for t in MIXED for w in t.split(" ")]
    texts = MIXED + [" ".join(rng.choice(pieces) for _ in range(rng.randrange(1, 30))) for _ in range(200)]
    fast, offsets = words_of_batch(pa.array(texts, pa.large_string()))
    reference = pc.utf8_split_whitespace(normalize_texts(pa.array(texts, pa.large_string())))
    for i, ref in enumerate(reference.to_pylist()):
        assert fast.to_pylist()[offsets[i]:offsets[i + 1]] == [w.strip() for w in ref if w.strip()], texts[i]


def test_word_hashes_without_strings_equal_the_hashes_of_the_words():
    texts = MIXED + ["", None, "one", "x " * 1000]
    hashes, offsets = word_hashes_of_batch(pa.array(texts, pa.large_string()))
    words, word_offsets = words_of_batch(pa.array(texts, pa.large_string()))
    assert (offsets == word_offsets).all() and (hashes == minhash.word_hashes(words)).all()
    assert np.unique(hashes).size == np.unique(np.asarray(words.to_pylist(), object)).size


def test_scripts_without_spaces_and_hangul_shingle_into_many_words():
    """Thai, Chinese, Japanese: one word per character; Korean is written with spaces (its syllables
    decompose into jamo under NFKD, inside the word)."""
    for text, at_least in (("ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ" * 3, 60), ("한국어 텍스트는 띄어쓰기를 합니다 " * 10, 40),
                           ("中文文本没有空格" * 5, 40), ("ひらがなとカタカナ" * 5, 40)):
        assert len(words_of(text)) >= at_least, text
        assert shingle_sets([text])[0].size >= 4  # repeated text: its distinct 5-grams


def test_batches_that_outgrow_the_first_buffers_are_scanned_again_larger():
    text = "Ⱥ" * 5000 + " " + "⑴" * 3000  # lowercase takes 3 bytes for 2; each ⑴ expands to a word of its own
    words = words_of(text)
    assert words[0] == "ⱥ" * 5000 and words[1:] == ["0"] * 3000
    assert word_hashes_of_batch([text])[1][-1] == 3001


def test_empty_batches_null_texts_and_one_giant_word():
    assert word_hashes_of_batch(pa.array([], pa.large_string()))[0].size == 0
    hashes, offsets = word_hashes_of_batch(pa.array([None, "", "   "], pa.large_string()))
    assert hashes.size == 0 and offsets.tolist() == [0, 0, 0, 0]
    giant = "a" * 300_000
    assert words_of(giant) == [giant]
    assert [s.size for s in shingle_sets([giant, giant + "b"])] == [1, 1]


def test_the_signature_scheme_is_part_of_the_settings_hash(monkeypatch):
    from jobs.config import load_jobs_config
    from jobs.dedup.job import signature_settings_sha

    cfg = load_jobs_config().dedup
    before = signature_settings_sha(cfg)
    assert signature_settings_sha(load_jobs_config().dedup) == before
    monkeypatch.setattr(minhash, "SCHEME", minhash.SCHEME + "-changed")
    assert signature_settings_sha(cfg) != before


def test_invalid_utf8_is_cut_at_its_text_and_never_read_past():
    """Spark strings can hold invalid UTF-8 (a cut multi-byte character, stray bytes): the scan reads no
    byte outside a text and treats what it cannot decode as a separator."""
    raw = [b"good words here \xe4\xb8", b"\xff\xfe next text \xf8\x88\x80\x80 tail", b"last \xc3"]
    offsets = np.cumsum([0] + [len(r) for r in raw]).astype(np.int64)
    texts = pa.LargeStringArray.from_buffers(len(raw), pa.py_buffer(offsets), pa.py_buffer(b"".join(raw) + bytes(64)))
    words, word_offsets = words_of_batch(texts)
    assert words.to_pylist() == ["good", "words", "here", "next", "text", "tail", "last"]
    assert word_offsets.tolist() == [0, 3, 6, 7]


def test_the_code_point_table_loaded_from_its_cache_file_equals_a_fresh_build():
    """New Spark Python workers load the table from beside numba's cache instead of rebuilding it."""
    from pathlib import Path

    from jobs.dedup import normalize

    built = normalize._build_codepoint_table()
    normalize.codepoint_table()  # written when missing
    normalize.codepoint_table.cache_clear()
    loaded = normalize.codepoint_table()  # a new process's first call: the file
    assert list((Path(normalize.__file__).parent / "__pycache__").glob("codepoints-*.npz"))
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(built, loaded))

