"""Per-document decoding and main-text extraction, without Spark."""
from conftest import CP1252_TEXT, FOOTER, PAGES
from jobs.config import load_jobs_config
from jobs.text.decode import decode_html
from jobs.text.main_text import Extracted, extract_document

CFG = load_jobs_config().extract


def test_windows_1252_from_meta_decodes_exactly():
    decoded = decode_html(PAGES[2].body, None, aliases=CFG.charset_aliases)
    assert decoded.source == "meta" and decoded.encoding == "cp1252" and decoded.replacements == 0
    assert CP1252_TEXT in decoded.text


def test_latin1_label_means_windows_1252():
    decoded = decode_html("l’œuvre “x”".encode("cp1252"), "ISO-8859-1", aliases=CFG.charset_aliases)
    assert decoded.text == "l’œuvre “x”" and decoded.source == "header"


def test_undecodable_bytes_fall_back_with_counted_replacements():
    decoded = decode_html(b"caf\xe9 ok \xff", None, aliases=CFG.charset_aliases, fallback="utf-8")
    assert decoded.source == "fallback" and decoded.replacements == 2 and decoded.text.startswith("caf\ufffd ok")


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
