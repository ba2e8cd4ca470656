"""bronze row -> silver document or (skip, reason): the per-document filter of `jobs.extract`.

Datatrove's shape: `filter(doc) -> doc | (None, reason)`; the reasons become the job's counters.
The extractor is rs-trafilatura (Rust, page-type aware) with trafilatura as the fallback on pages
where it finds little, or trafilatura alone (`extract.extractor`); both get the same `extract.*`
switches.  With rs-trafilatura:
- the page type is hinted from the URL, og:type or JSON-LD when the page says it (`jobs.text.page_type`),
  which skips rs-trafilatura's own classifier, a third of its time on articles;
- trafilatura runs where rs-trafilatura found under `fallback_min_words` words, or under
  `fallback_below_share` of the words resiliparse (~1.5 ms a page) finds as main content (a long article
  cut to one section), and its text wins only when it is several times longer (`choose_text`); it keeps
  user comments only on the page types whose comments are their content (forums);
- later copies of long repeated lines are dropped (`jobs.text.lines`), except on articles and documentation.
Chosen on WCXB dev (bench/extraction_units.py per lever, bench/extraction_quality.py end to end):
rs-trafilatura alone 0.935 / 0.762 word-F1 on articles / other types, trafilatura alone 0.929 / 0.698,
the fallback under 200 words 0.943 / 0.773, with the three levers above (see conf/jobs.yaml for the
figures); keeping lines that other extractors keep (votes, unions) lost precision on every type.
The title comes with rs-trafilatura's result, or from the page head: never through trafilatura's
`with_metadata`, which costs about a third of its time.
Speed (bench/extraction_speed.py, CPU time in one process): the job costs about what rs-trafilatura alone
costs (0.94x its docs/CPU-s on WCXB dev articles): the hint saves more than resiliparse, the fallback and the
checks add.  No page is parsed twice by the same library; in its sandbox the job costs ~2 % more CPU a page (the
parent's ~0.3 ms round trip) once its child is warm.
"""
from __future__ import annotations

import html as html_entities
import logging
import re
from dataclasses import dataclass

import trafilatura

from jobs.config import ExtractSettings
from jobs.text.decode import decode_html, tld_of
from jobs.text.lines import drop_repeated_lines
from jobs.text.page_type import page_type_hint

log = logging.getLogger("weblm.jobs.extract")
logging.getLogger("trafilatura").setLevel(logging.ERROR)  # it logs every page it finds too short

EXTRACTORS = ("rs_trafilatura", "trafilatura")
_SNIFF_CHARS = 65536  # the binary check and the head's <title> look at this much of the page
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.I | re.S)
# C0 controls that text never holds (tab, newlines, form feed do), as the bytes that UTF-8 spells them with
_CONTROL_BYTES = bytes(range(0x09)) + b"\x0b" + bytes(range(0x0e, 0x20))
_NOT_CONTROL = bytes(range(256)).translate(None, _CONTROL_BYTES)
_OPEN_TAG = re.compile(rb"<[A-Za-z]")
_VOID = b"area|base|br|col|embed|hr|img|input|link|meta|param|source|track|wbr|basefont|frame|keygen"
# an element's start tag (not void, not self-closed: one level deeper) and its end tag (one level up)
_START = re.compile(rb"<(?!(?:" + _VOID + rb")[\s/>])[A-Za-z][^>]*(?<!/)>", re.I)
_END = re.compile(rb"</(?!(?:" + _VOID + rb")[\s/>])[A-Za-z][^>]*>", re.I)
_MARKS = bytes.maketrans(b"\x01\x02", b"  ")  # the page's own \x01 and \x02 bytes, which would read as tags
_NOT_MARK = bytes(range(256)).translate(None, b"\x01\x02")


@dataclass(frozen=True)
class Extracted:
    title: str | None
    text: str
    encoding: str
    decode_source: str
    replacements: int
    page_type: str | None = None  # rs-trafilatura's page type (article, forum, product, ...); None from trafilatura


def nesting_depth(html: bytes, at_least: int = 0) -> int:
    """The deepest element nesting of the page (void and self-closed elements do not nest).

    A page with no more opening tags than `at_least` cannot be deeper: it is answered from a count
    of tags (~0.3 ms for 100 KB) instead of the full scan.  The scan (~1 ms for 100 KB) marks each start
    tag \\x01 and each end tag \\x02 with two C-level regex substitutions, keeps only the marks and takes
    the running sum's maximum with numpy; a findall of every tag and a Python loop over them took 5x longer.
    """
    opening = len(_OPEN_TAG.findall(html))
    if opening <= at_least:
        return opening
    marks = _END.sub(b"\x02", _START.sub(b"\x01", html.translate(_MARKS))).translate(None, _NOT_MARK)
    if not marks:
        return 0
    import numpy  # pandas' and Spark's dependency; only pages with many tags get here

    steps = 3 - 2 * numpy.frombuffer(marks, numpy.uint8).astype(numpy.int64)  # \x01 -> +1, \x02 -> -1
    return max(0, int(numpy.cumsum(steps).max()))


def control_chars(text: str) -> int:
    """How many C0 control characters (not tab, newlines, form feed) `text` holds.  UTF-8 spells each as its
    own byte and uses no byte below 0x80 for anything else, so a C-level byte deletion counts them: a third of
    the time of a regex findall over the text."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data.translate(None, _NOT_CONTROL))


def head_title(html: str) -> str | None:
    """The page's <title>, whitespace collapsed and entities decoded; None when it has none."""
    match = _TITLE.search(html, 0, _SNIFF_CHARS)
    title = " ".join(html_entities.unescape(match.group(1)).split()) if match else ""
    return title or None


def tidy(text: str | None) -> str:
    """Lines stripped, blank ones dropped: rs-trafilatura leaves runs of whitespace-only lines from
    layout tables, which would pass `min_chars` on whitespace alone."""
    return "\n".join(line.strip() for line in (text or "").splitlines() if line.strip())


def choose_text(primary: str, fallback, cfg: ExtractSettings, page_words=None) -> str:
    """rs-trafilatura's text, or trafilatura's (`fallback()`, run only when needed) where rs-trafilatura
    found fewer than `fallback_min_words` words, or less than `fallback_below_share` of `page_words()` (the
    page's main-content words by a cheap second extractor), and trafilatura finds `fallback_min_gain` times
    as many.

    A short primary text is either a short page (both agree) or a miss (rs-trafilatura kept a title
    and empty layout cells of a forum thread or a shop, or one section of a long article); only a clearly
    longer fallback is a better bet.
    """
    if not tf_needed(primary, cfg, page_words):
        return primary
    other = fallback()
    return other if len(other.split()) > cfg.fallback_min_gain * len(primary.split()) else primary


def tf_needed(primary: str, cfg: ExtractSettings, page_words=None) -> bool:
    """Whether trafilatura runs as the fallback: rs-trafilatura found under `fallback_min_words` words, or
    under `fallback_below_share` of `page_words()`."""
    words = len(primary.split())
    return words < cfg.fallback_min_words or (
        page_words is not None and cfg.fallback_below_share > 0 and words < cfg.fallback_below_share * page_words())


def _trafilatura(html: str, url: str | None, cfg: ExtractSettings, include_comments: bool | None = None) -> str:
    text = trafilatura.extract(
        html, url=url, favor_precision=cfg.favor_precision, favor_recall=cfg.favor_recall,
        include_comments=cfg.include_comments if include_comments is None else include_comments,
        include_tables=cfg.include_tables, deduplicate=cfg.deduplicate, with_metadata=False)
    return tidy(text)


def _rs_trafilatura(html: str, url: str | None, cfg: ExtractSettings, page_type: str | None = None):
    import rs_trafilatura  # imported on first use: only the rs_trafilatura setting needs it

    # include_comments=False: rs-trafilatura 0.1.1 only fills its comments field with them (which the Python binding
    # drops; its forum profile turns them on for itself), so asking costs ~0.5 ms a page for the same main_content
    result = rs_trafilatura.extract(
        html, url=url, favor_precision=cfg.favor_precision, favor_recall=cfg.favor_recall,
        include_comments=False, include_tables=cfg.include_tables, page_type=page_type)
    return (result.title or "").strip() or None, tidy(result.main_content), result.page_type


def _resiliparse_words(html: str, found: int = 0, share: float = 0.0) -> int:
    """Words of resiliparse's main content, the measure of how much text rs-trafilatura may have missed (`found`
    of them, where rs-trafilatura needs at least `share`); or the page's visible words when those already show it
    did not.

    The page is parsed once (~0.8 ms) and shared: visible words first (~0.4 ms more), main content (~1.7 ms more)
    only when rs-trafilatura's `found` words are under `share` of the visible ones, or above all of them (then
    this reading lost text: a few pages' hidden wrappers empty it, never the main-content reading).  Main content
    is part of the visible text, so skipping it changes no decision: WCXB dev needs it on 30 of 770 articles.
    """
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    if share > 0:
        visible = len(extract_plain_text(tree, main_content=False).split())
        if share * visible <= found <= visible:
            return visible
    return len(extract_plain_text(tree, main_content=True).split())


def main_text(html: str, url: str | None, cfg: ExtractSettings):
    """(title, main text, page type), or None when no extractor finds main content."""
    if cfg.extractor == "trafilatura":
        title, text, page_type = head_title(html), _trafilatura(html, url, cfg), None
    elif cfg.extractor == "rs_trafilatura":
        hint = page_type_hint(html, url) if cfg.page_type_hints else None
        title, text, page_type = _rs_trafilatura(html, url, cfg, hint)
        comments = cfg.include_comments and page_type in cfg.comments_page_types  # a forum's posts are its text
        found = len(text.split())
        text = choose_text(text, lambda: _trafilatura(html, url, cfg, include_comments=comments), cfg,
                           page_words=lambda: _resiliparse_words(html, found, cfg.fallback_below_share))
        if page_type not in cfg.keep_repeats_page_types:
            text = drop_repeated_lines(text, cfg.repeated_line_min_words)
    else:
        raise ValueError(f"extract.extractor is {cfg.extractor!r}; use one of {', '.join(EXTRACTORS)}")
    return (title, text, page_type) if text else None


def extract_document(html: bytes | None, status: int | None, content_type: str | None,
                     charset: str | None, url: str | None, cfg: ExtractSettings) -> Extracted | str:
    """The document's main text, or the reason it was skipped."""
    if cfg.extractor not in EXTRACTORS:  # a setting error fails the task with this message, not every page
        raise ValueError(f"extract.extractor is {cfg.extractor!r}; use one of {', '.join(EXTRACTORS)}")
    if status not in cfg.statuses:
        return "bad_status"
    if (content_type or "") not in cfg.content_types:
        return "not_html"
    if not html or not html.strip():
        return "empty_page"
    if len(html) > cfg.max_html_bytes:
        return "too_large"
    if nesting_depth(html, at_least=cfg.max_nesting_depth) > cfg.max_nesting_depth:
        return "too_deep"
    decoded = decode_html(html, charset, aliases=cfg.charset_aliases, fallback=cfg.fallback_encoding,
                          sniff_bytes=cfg.meta_sniff_bytes, tld=tld_of(url))
    sniff = decoded.text[:_SNIFF_CHARS]
    if control_chars(sniff) > cfg.max_control_chars * len(sniff):
        return "binary_content"
    try:
        found = main_text(decoded.text, url, cfg)
    except Exception as exc:  # trafilatura/lxml raise many types on odd trees: count, never crash the task
        log.warning("extract failed for %s: %s: %s", url, type(exc).__name__, exc)
        return "extractor_error"
    if found is None:
        return "no_main_text"
    title, text, page_type = found
    if len(text) < cfg.min_chars:
        return "too_short"
    return Extracted(title, text, decoded.encoding, decoded.source, decoded.replacements, page_type)
