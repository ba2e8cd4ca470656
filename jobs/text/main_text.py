"""bronze row -> silver document or (skip, reason): the per-document filter of `jobs.extract`.

Datatrove's shape: `filter(doc) -> doc | (None, reason)`; the reasons become the job's counters.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import trafilatura

from jobs.config import ExtractSettings
from jobs.text.decode import decode_html

log = logging.getLogger("weblm.jobs.extract")
logging.getLogger("trafilatura").setLevel(logging.ERROR)  # it logs every page it finds too short


@dataclass(frozen=True)
class Extracted:
    title: str | None
    text: str
    encoding: str
    decode_source: str
    replacements: int


def main_text(html: str, url: str | None, cfg: ExtractSettings):
    """trafilatura's main text and title, or None when it finds no main content."""
    document = trafilatura.bare_extraction(
        html, url=url, with_metadata=True, favor_precision=cfg.favor_precision,
        favor_recall=cfg.favor_recall, include_comments=cfg.include_comments,
        include_tables=cfg.include_tables, deduplicate=cfg.deduplicate)
    if document is None or not (document.text or "").strip():
        return None
    return (document.title or None), document.text.strip()


def extract_document(html: bytes | None, status: int | None, content_type: str | None,
                     charset: str | None, url: str | None, cfg: ExtractSettings) -> Extracted | str:
    """The document's main text, or the reason it was skipped."""
    if status not in cfg.statuses:
        return "bad_status"
    if (content_type or "") not in cfg.content_types:
        return "not_html"
    if not html or not html.strip():
        return "empty_page"
    if len(html) > cfg.max_html_bytes:
        return "too_large"
    decoded = decode_html(html, charset, aliases=cfg.charset_aliases, fallback=cfg.fallback_encoding,
                          sniff_bytes=cfg.meta_sniff_bytes)
    try:
        found = main_text(decoded.text, url, cfg)
    except Exception as exc:  # trafilatura/lxml raise many types on odd trees: count, never crash the task
        log.warning("extract failed for %s: %s: %s", url, type(exc).__name__, exc)
        return "extractor_error"
    if found is None:
        return "no_main_text"
    title, text = found
    if len(text) < cfg.min_chars:
        return "too_short"
    return Extracted(title, text, decoded.encoding, decoded.source, decoded.replacements)
