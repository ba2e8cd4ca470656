"""Per-document decoding and main-text extraction, without Spark."""
from conftest import CP1252_TEXT, FOOTER, PAGES
from jobs.config import load_jobs_config
from jobs.text.decode import decode_html, tld_of
from jobs.text.main_text import Extracted, extract_document

CFG = load_jobs_config().extract


def test_windows_1252_from_meta_decodes_exactly():
    decoded = decode_html(PAGES[2].body, None, aliases=CFG.charset_aliases)
    assert decoded.source == "meta" and decoded.encoding == "cp1252" and decoded.replacements == 0
    assert CP1252_TEXT in decoded.text


def test_latin1_label_means_windows_1252():
    decoded = decode_html("l’œuvre “x”".encode("cp1252"), "ISO-8859-1", aliases=CFG.charset_aliases)
    assert decoded.text == "l’œuvre “x”" and decoded.source == "header"


def test_a_legacy_page_declaring_utf8_is_decoded_by_detection():
    french = "<p>Il était très content d'aller à la plage avec son père.</p>"
    page = "<p>The committee met on Tuesday to discuss the budget.</p>" * 30 + french   # a French quote, English page
    decoded = decode_html(page.encode("cp1252"), "utf-8", aliases=CFG.charset_aliases)
    assert (decoded.source, decoded.encoding, decoded.replacements) == ("detected", "cp1252", 0)
    assert decoded.text == page                 # not cp1250's "trčs" nor "pčre"
    short = "<p>Жители довольны решением совета.</p>"   # 39 bytes, no declaration: the TLD hints
    decoded = decode_html(short.encode("cp1251"), None, aliases=CFG.charset_aliases, tld=tld_of("http://gazeta.ru/a"))
    assert (decoded.source, decoded.encoding, decoded.text) == ("detected", "cp1251", short)
    korean = "<p>위원회는 화요일에 모였다. 똠방각하 펲시콜라</p>"   # UHC syllables beyond EUC-KR: WHATWG's euc-kr is windows-949
    decoded = decode_html(korean.encode("cp949"), "utf-8", aliases=CFG.charset_aliases)
    assert (decoded.encoding, decoded.text) == ("cp949", korean)


def test_the_tld_reaches_the_detector_as_its_rule_allows(monkeypatch):
    import chardetng_py
    hints = []
    real = chardetng_py.detect
    monkeypatch.setattr(chardetng_py, "detect", lambda data, **kw: hints.append(kw["tld"]) or real(data, **kw))
    page = "<p>Жители довольны решением совета.</p>".encode("cp1251")
    for tld in ("xn--p1ai", "ru", "RU", "co.uk", None):   # .рф in punycode; not lower case, not one label: no hint
        assert decode_html(page, None, aliases=CFG.charset_aliases, tld=tld).encoding == "cp1251"
    assert hints == [b"xn--p1ai", b"ru", None, None, None]


def test_tld_of_gives_the_hosts_last_label():
    assert [tld_of(u) for u in ("http://www.Example.CO.UK/a", "http://xn--p1ai/", "http://localhost:8080/")] == \
        ["uk", "xn--p1ai", "localhost"]
    assert [tld_of(u) for u in ("https://[::1]/x", "http://10.0.0.1/", None, "http://[bad/")] == [None] * 4


def test_undecodable_bytes_fall_back_with_counted_replacements():
    decoded = decode_html(b"caf\xe9 ok \xff", None, aliases=CFG.charset_aliases, fallback="utf-8")
    assert decoded.source == "detected" and decoded.text == "café ok ÿ"  # chardetng: windows-1252
    # a Shift_JIS page with a broken byte pair: no codec decodes it whole, so the declared one with U+FFFD, counted
    japanese = "<p>委員会は火曜日に市の予算について話し合うために集まった。</p>".encode("shift_jis")
    decoded = decode_html(japanese + b"\x81\x20" + japanese, "utf-8", aliases=CFG.charset_aliases, fallback="utf-8")
    assert decoded.source == "fallback" and decoded.encoding == "utf-8"
    assert decoded.replacements > 20 and decoded.text.startswith("<p>\ufffd")


def test_main_text_keeps_the_article_and_drops_nav_and_footer():
    result = extract_document(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url, CFG)
    assert isinstance(result, Extracted)
    assert result.title == "Otters of the river"
    assert "how the young learn to swim" in result.text and "Otter paragraph 5" in result.text
    assert "Menu entry" not in result.text and FOOTER not in result.text and "newsletter" not in result.text


def test_skips_say_why():
    assert extract_document(b"", 200, "text/html", None, "u", CFG) == "empty_page"
    assert extract_document(b"  \n ", 200, "text/html", None, "u", CFG) == "empty_page"
    assert extract_document(PAGES[0].body, 404, "text/html", None, "u", CFG) == "bad_status"
    assert extract_document(b"\x89PNG", 200, "image/png", None, "u", CFG) == "not_html"
    assert extract_document(b"<html><body><p>Hi.</p></body></html>", 200, "text/html", None, "u", CFG) in (
        "too_short", "no_main_text")
    huge = b"<html><body>" + b"<p>x</p>" * (CFG.max_html_bytes // 8 + 1) + b"</body></html>"
    assert extract_document(huge, 200, "text/html", None, "u", CFG) == "too_large"


# --- which extractor's text the job keeps (jobs.text.main_text.choose_text and the fallback's comments) ---

import dataclasses  # noqa: E402

import pytest  # noqa: E402

from jobs.text import main_text as main_text_module  # noqa: E402
from jobs.text.main_text import choose_text, main_text, tidy  # noqa: E402

SENTENCE = "Members compare notes on restoring old river boats with cedar planks and copper nails. "


def forum_thread(posts: int) -> str:
    """A thread page: a short opening post, then replies marked up as comments."""
    replies = "".join(f"<li class='comment'><p>Reply {i}: {SENTENCE * 3}</p></li>" for i in range(posts))
    return ("<html><head><title>Cedar planks?</title></head><body><nav><a href='/'>Home</a></nav>"
            f"<article><h1>Cedar planks?</h1><p>Opening post: {SENTENCE * 4}</p></article>"
            f"<section id='comments' class='comments'><ol>{replies}</ol></section></body></html>")


def test_a_long_primary_text_is_kept_without_running_the_fallback():
    primary = " ".join(["word"] * CFG.fallback_min_words)
    assert choose_text(primary, lambda: pytest.fail("the fallback ran"), CFG) == primary


def test_a_short_primary_text_gives_way_only_to_a_clearly_longer_fallback():
    short = "Title only and five words"
    longer = " ".join(["w"] * int(5 * CFG.fallback_min_gain + 1))
    barely = " ".join(["w"] * int(5 * CFG.fallback_min_gain))
    assert choose_text(short, lambda: longer, CFG) == longer
    assert choose_text(short, lambda: barely, CFG) == short  # not `fallback_min_gain` times as many words
    assert choose_text("", lambda: "anything", CFG) == "anything"


def test_tidy_drops_the_blank_layout_lines_rs_trafilatura_leaves():
    assert tidy("Title\n   \n\t\n  body text  \n\n") == "Title\nbody text"
    assert tidy(None) == ""


def test_comments_are_main_text_on_forums_only(monkeypatch):
    page = forum_thread(posts=8)
    calls = []

    def rs_misses_the_posts(page_type):
        def fake(html, url, cfg, hint=None):  # rs-trafilatura's answer on a thread it misses: the title and little else
            return "Cedar planks?", "Cedar planks?", page_type
        return fake

    real_trafilatura = main_text_module._trafilatura
    monkeypatch.setattr(main_text_module, "_trafilatura",
                        lambda html, url, cfg, include_comments=None: calls.append(include_comments)
                        or real_trafilatura(html, url, cfg, include_comments))
    monkeypatch.setattr(main_text_module, "_rs_trafilatura", rs_misses_the_posts("forum"))
    _, forum_text, _ = main_text(page, "https://boats.example/t/1", CFG)
    monkeypatch.setattr(main_text_module, "_rs_trafilatura", rs_misses_the_posts("article"))
    _, article_text, _ = main_text(page, "https://boats.example/t/1", CFG)
    assert calls == [True, False]
    assert "Reply 7:" in forum_text and "Opening post" in forum_text  # the replies are the thread
    assert "Reply 7:" not in article_text and "Opening post" in article_text


def test_with_comments_off_no_page_type_keeps_them(monkeypatch):
    cfg = dataclasses.replace(CFG, include_comments=False)
    monkeypatch.setattr(main_text_module, "_rs_trafilatura", lambda html, url, c, hint=None: ("t", "t", "forum"))
    _, text, _ = main_text(forum_thread(posts=8), None, cfg)
    assert "Reply 7:" not in text and "Opening post" in text


def test_the_real_extractors_leave_the_comments_off_a_page_typed_as_an_article():
    result = extract_document(forum_thread(posts=8).encode(), 200, "text/html", "utf-8", "https://boats.example/stories/cedar-planks", CFG)
    assert isinstance(result, Extracted) and result.page_type == "article"  # rs-trafilatura's reading of it
    assert "Opening post" in result.text and "Reply" not in result.text
    assert "\n\n" not in result.text and all(line == line.strip() for line in result.text.splitlines())


# --- what rs-trafilatura misses or repeats (resiliparse's word count, the page-type hint, repeated lines) ---

from jobs.text.lines import drop_repeated_lines  # noqa: E402
from jobs.text.page_type import page_type_hint  # noqa: E402

BLURB = "Write, sketch and draw on your favourite notetaking app with the redesigned pen."


def test_later_copies_of_long_lines_are_dropped_and_short_repeats_stay():
    text = "\n".join([BLURB, "Reply", "First post text.", BLURB, "Reply", "A different line of six words here."])
    assert drop_repeated_lines(text, 6).splitlines() == [
        BLURB, "Reply", "First post text.", "Reply", "A different line of six words here."]
    assert drop_repeated_lines(BLURB.upper() + "\n" + BLURB, 6) == BLURB.upper()  # same words, any case or spacing
    assert drop_repeated_lines(text, 0) == text


def test_the_page_says_its_type_or_the_classifier_decides():
    og = "<html><head><meta property='og:type' content='article'></head><body></body></html>"
    ld = '<html><script type="application/ld+json">{"@type": "BlogPosting"}</script></html>'
    plain = "<html><head><title>Otters</title></head><body><p>Otters.</p></body></html>"
    assert page_type_hint(og, "https://river.example/otters") == "article"
    assert page_type_hint(ld, None) == "article"
    assert page_type_hint(plain, "https://boats.example/t/cedar-planks/17") == "forum"  # rs-trafilatura's URL pattern
    assert page_type_hint(plain, "https://river.example/otters") is None
    assert page_type_hint(og.replace("'article'", "'website'"), None) is None


def test_a_long_primary_text_gives_way_when_the_page_holds_far_more_words():
    primary = " ".join(["word"] * CFG.fallback_min_words)
    whole = " ".join(["w"] * int(CFG.fallback_min_words * CFG.fallback_min_gain + 1))
    many = CFG.fallback_min_words / CFG.fallback_below_share + 1  # rs-trafilatura has under the share of these
    assert choose_text(primary, lambda: whole, CFG, page_words=lambda: many) == whole
    assert choose_text(primary, lambda: primary + " more", CFG, page_words=lambda: many) == primary  # not longer enough
    assert choose_text(primary, lambda: pytest.fail("the fallback ran"), CFG,
                       page_words=lambda: CFG.fallback_min_words) == primary
    off = dataclasses.replace(CFG, fallback_below_share=0.0)
    assert choose_text(primary, lambda: pytest.fail("the fallback ran"), off, page_words=lambda: many) == primary


def test_repeated_blocks_are_kept_once_except_on_documentation(monkeypatch):
    repeated = "\n".join([BLURB, "Colorful design", BLURB, BLURB])
    for page_type, copies in (("product", 1), ("documentation", 3)):
        monkeypatch.setattr(main_text_module, "_rs_trafilatura", lambda html, url, cfg, hint=None: (None, repeated, page_type))
        monkeypatch.setattr(main_text_module, "_trafilatura", lambda *a, **k: "")
        _, text, _ = main_text("<html></html>", None, dataclasses.replace(CFG, fallback_min_words=0))
        assert text.count(BLURB) == copies


def test_the_hint_reaches_rs_trafilatura(monkeypatch):
    seen = []
    real = main_text_module._rs_trafilatura
    monkeypatch.setattr(main_text_module, "_rs_trafilatura",
                        lambda html, url, cfg, hint=None: seen.append(hint) or real(html, url, cfg, hint))
    page = forum_thread(posts=2).replace("<head>", "<head><meta property='og:type' content='article'>")
    result = extract_document(page.encode(), 200, "text/html", "utf-8", "https://boats.example/stories/1", CFG)
    no_hints = dataclasses.replace(CFG, page_type_hints=False)
    extract_document(page.encode(), 200, "text/html", "utf-8", "https://boats.example/stories/1", no_hints)
    assert seen == ["article", None] and isinstance(result, Extracted) and result.page_type == "article"


def test_resiliparse_counts_the_main_content_words():
    page = forum_thread(posts=0)  # the opening post: 4 sentences of 14 words, a title, a nav link
    assert 4 * 14 <= main_text_module._resiliparse_words(page) <= 4 * 14 + 10


def test_resiliparse_reads_visible_words_first_and_main_content_only_when_they_cannot_decide():
    page = forum_thread(posts=3)  # opening post and replies: the visible words are well above the main content's
    main_words = main_text_module._resiliparse_words(page)
    visible = main_text_module._resiliparse_words(page, found=main_words, share=0.3)
    assert visible > main_words  # rs-trafilatura found 0.3 of the visible words or more: no fallback either way
    assert main_text_module._resiliparse_words(page, found=5, share=0.3) == main_words  # under: main content decides
    assert main_text_module._resiliparse_words(page, found=visible + 1, share=0.3) == main_words  # above all visible


def test_control_characters_are_counted_in_any_script():
    import re

    text = "Привет \x00 мир\tß\x1f 日本\x0b\n\r\x0c" * 3 + "\ud800"  # a lone surrogate must not break the count
    assert main_text_module.control_chars(text) == len(re.findall(r"[\x00-\x08\x0b\x0e-\x1f]", text)) == 9


def test_nesting_depth_ignores_the_pages_own_marker_bytes():
    from jobs.text.main_text import nesting_depth

    assert nesting_depth(b"\x01\x01\x01<div><p>a</p></div>\x02", at_least=0) == 2
    assert nesting_depth(b"<DIV><Span/><br></div><div>", at_least=0) == 1  # self-closed, void and unclosed
