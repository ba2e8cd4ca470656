"""jobs.text.line_model: the candidate lines of a page, their features and labels, and the kept text."""
import numpy as np

from jobs.text.line_model import FEATURES, assemble, candidate_lines, line_labels, page_features

COL = {name: i for i, name in enumerate(FEATURES)}


def test_candidates_keep_the_primary_lines_with_copies_and_place_other_lines_after_their_anchor():
    primary = "Intro line of the story.\nSecond paragraph here.\nIntro line of the story."
    resiliparse = "Menu\nIntro line of the story.\nA caption between.\nSecond paragraph here.\nFooter links"
    trafilatura = "Second paragraph here!\nExtra closing remark."  # same words as a primary line: not a new candidate
    cands = candidate_lines([primary, resiliparse, trafilatura])
    assert [c.line for c in cands] == ["Menu", "Intro line of the story.", "A caption between.",
                                       "Second paragraph here.", "Extra closing remark.", "Footer links", "Intro line of the story."]
    assert [c.sources for c in cands][:4] == [(False, True, False), (True, True, False), (False, True, False), (True, True, True)]
    assert candidate_lines(["", "", ""]) == []


def test_features_describe_the_line_its_copies_the_title_and_its_neighbours():
    cands = candidate_lines(["Otters of the river\nOtters swim at dawn, and they hunt fish.\nBuy now\nBuy now",
                             "Otters swim at dawn, and they hunt fish.\nCookie settings", ""])
    x = page_features(cands, "product", "Otters of the river | Shop", tf_ran=False)
    assert x.shape == (len(cands), len(FEATURES)) and x.dtype == np.float32
    body = [c.line for c in cands].index("Otters swim at dawn, and they hunt fish.")
    assert x[body, COL["in_rs"]] == 1 and x[body, COL["in_rp"]] == 1 and x[body, COL["in_tf"]] == 0
    assert x[body, COL["words"]] == 8 and x[body, COL["terminal"]] == 1
    assert x[0, COL["title_in_line"]] == 0 and x[0, COL["title_sim"]] == 1.0  # every word of line 0 is in the title
    buy = [i for i, c in enumerate(cands) if c.line == "Buy now"]
    assert [x[i, COL["copy_index"]] for i in buy] == [1, 2] and x[buy[0], COL["copies"]] == 2
    cookie = [c.line for c in cands].index("Cookie settings")
    assert x[cookie, COL["in_rs"]] == 0 and x[cookie, COL["prev_in_rs"]] == 1
    assert x[0, COL["type_product"]] == 1 and x[0, COL["type_article"]] == 0
    assert page_features([], None, None, False).shape == (0, len(FEATURES))


def test_labels_are_the_share_of_a_line_s_words_in_the_truth_and_assembly_keeps_page_order():
    cands = candidate_lines(["The otter eats fish daily.\nShare on social media\n---", "", ""])
    assert line_labels(cands, "THE otter eats fish daily and sleeps").tolist() == [1, 0, 0]  # "---" has no words
    assert line_labels(cands, "otter fish").tolist() == [0, 0, 0]  # 2 of 5 words: under half
    assert assemble(cands, np.array([True, False, True])) == "The otter eats fish daily.\n---"


def test_bigram_labels_need_the_line_s_word_pairs_not_only_its_words():
    cands = candidate_lines(["fish eats the otter\nthe otter eats fish\nfish", "", ""])
    truth = "The otter eats fish every day"
    assert line_labels(cands, truth).tolist() == [1, 1, 1]  # every word is in the truth, in any order
    assert line_labels(cands, truth, "bigrams").tolist() == [0, 1, 1]  # (fish, eats), (eats, the) are not; 1 of 3 pairs


def test_consumed_labels_spend_the_truth_so_a_second_copy_is_not_main_text():
    cands = candidate_lines(["the otter eats fresh fish\nthe otter eats fresh fish", "", ""])
    assert line_labels(cands, "The otter eats fresh fish.", "trigrams").tolist() == [1, 1]
    assert line_labels(cands, "The otter eats fresh fish.", "consumed").tolist() == [1, 0]
    assert line_labels(cands, "The otter eats fresh fish. The otter eats fresh fish.", "consumed").tolist() == [1, 1]
