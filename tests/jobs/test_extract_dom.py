"""jobs.text.dom_features: each candidate line found in the page's DOM, and the features of the block holding it."""
import numpy as np

from jobs.text.dom_features import DOM_FEATURES, PageDom, dom_features
from jobs.text.line_model import candidate_lines

COL = {name: i for i, name in enumerate(DOM_FEATURES)}

PAGE = """<html><head><title>Otters</title><script>var menu = "Home Blog";</script></head><body>
<nav class="site-nav"><ul><li><a href="/">Home</a></li><li><a href="/blog">Blog</a></li></ul></nav>
<main><h2>Otter <b>news</b>tonight</h2>
<p>The otter eats fish at dawn.<br>It sleeps <a href="#">on its back</a> afterwards.</p>
<div class="grid">""" + "".join(f'<div class="card"><span>Item {n} river kit</span></div>' for n in range(6)) + """</div>
</main><footer id="footer">Copyright 2024 Otter Shop</footer><!-- a comment --></body></html>"""


def _row(x, i, *names):
    return [float(x[i, COL[n]]) for n in names]


def test_the_word_stream_joins_inline_text_and_cuts_at_blocks_and_line_breaks():
    dom = PageDom(PAGE)
    assert dom.words[:4] == ["home", "blog", "otter", "newstonight"]  # <b> inside a word does not split it
    assert "var" not in dom.words and "comment" not in dom.words  # scripts, the head and comments are not text
    blocks = [dom.tag[b] for b in dom.word_block]
    assert blocks[:4] == ["li", "li", "h2", "h2"] and blocks[-1] == "footer"
    assert PageDom("").words == [] and PageDom("   ").words == []


def test_each_line_takes_its_block_s_tag_links_ancestors_and_class_keywords():
    primary = "Otter newstonight\nThe otter eats fish at dawn.\nIt sleeps on its back afterwards.\n" + \
              "\n".join(f"Item {n} river kit" for n in range(6))
    cands = candidate_lines([primary, "Home\nBlog\n" + primary + "\nCopyright 2024 Otter Shop\nNot on the page", ""])
    x = dom_features(PAGE, [c.key for c in cands], [c.sources for c in cands])
    assert x.shape == (len(cands), len(DOM_FEATURES)) and x.dtype == np.float32
    at = {c.line: i for i, c in enumerate(cands)}
    assert _row(x, at["Home"], "mapped", "blk_li", "anc_nav", "cls_nav", "blk_link_density", "anc_main") == [1, 1, 1, 1, 1, 0]
    assert _row(x, at["Otter newstonight"], "heading", "anc_main", "blk_link_density") == [2, 1, 0]
    sleeps = at["It sleeps on its back afterwards."]
    assert x[sleeps, COL["blk_p"]] == 1 and x[sleeps, COL["prev_same_block"]] == 1  # <br> splits one <p> in two lines
    assert abs(x[sleeps, COL["blk_link_density"]] - 3 / 12) < 1e-6  # 3 of the paragraph's 12 words are a link
    item = at["Item 3 river kit"]
    assert x[item, COL["cls_card"]] == 1 and x[item, COL["rep_max_anc"]] == np.float32(np.log1p(6))  # a grid of 6 cards
    assert x[at["Copyright 2024 Otter Shop"], COL["cls_footer"]] == 1
    assert x[at["Copyright 2024 Otter Shop"], COL["in_rs_box80"]] == 0 and x[item, COL["in_rs_box80"]] == 1
    missing = at["Not on the page"]
    assert x[missing, COL["mapped"]] == 0 and x[missing, COL["depth"]] == -1


def test_broken_or_empty_html_gives_unmapped_rows_never_an_error():
    keys, held = ["some words here"], [(True, False, False)]
    for html in ("", "<<<>>>", "\x00\x01 binary", "<div>" * 5000 + "some words here"):
        x = dom_features(html, keys, held)
        assert x.shape == (1, len(DOM_FEATURES))
    assert dom_features("<p>x</p>", [], []).shape == (0, len(DOM_FEATURES))
