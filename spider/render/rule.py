"""Does this response need a browser?  Pure functions: signals from the plain HTML, then a decision.

Every signal is recorded (the decision's `signals`), so thresholds can be re-tuned from the stats and the
bench (bench/render_selective.py) without re-fetching anything ("score once, decide later").
The signals, from what SPA frameworks leave in their server HTML:
  - visible text (scripts, styles, templates, noscript removed) against the HTML's size: a shell is thin;
  - an empty mount point (`#root` React/CRA, `#app` Vue, `#__next` Next.js, `#__nuxt` Nuxt, `#svelte`);
  - a framework bootstrap (`__NEXT_DATA__`, `__NUXT__`, `__INITIAL_STATE__`) on a page with little text;
  - a `<noscript>` asking the reader to turn JavaScript on (while text a server puts in `<noscript>` for readers
    without JavaScript, as Discourse does, counts as text: an extractor reads it without a browser);
  - no script at all: nothing a browser could add, never rendered.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import lxml.html
from lxml import etree

from spider.render.config import RenderConfig

MOUNT_IDS = ("root", "app", "__next", "__nuxt", "svelte", "___gatsby")
BOOTSTRAP_MARKERS = (b"__NEXT_DATA__", b"__NUXT__", b"__INITIAL_STATE__", b"__APOLLO_STATE__")
_NOSCRIPT_ASKS_JS = re.compile(r"(enable|turn on|activate|allow)\s+javascript|javascript\s+(is\s+)?(required|disabled"
                               r"|must be enabled|needs to be enabled)|requires?\s+javascript|need\s+javascript",
                               re.IGNORECASE)
_INVISIBLE = ("script", "style", "noscript", "template", "svg")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Signals:
    html_bytes: int
    visible_chars: int
    text_ratio: float            # visible_chars / html_bytes
    scripts: int                 # <script> elements (inline or src)
    empty_mount: str             # id of an empty SPA mount point, "" when none
    bootstrap: str               # framework bootstrap marker found, "" when none
    noscript_asks_js: bool
    noscript_chars: int = 0      # text the server put in <noscript> for readers without JS (Discourse, some CMSs)
    parse_error: str = ""        # what lxml said when the HTML could not be parsed


@dataclass(frozen=True)
class Decision:
    render: bool
    reason: str                  # one word: what decided it (counted in the stats as weblm/render/decided/<reason>)
    signals: Signals

    def record(self) -> dict:
        return {"render": self.render, "reason": self.reason, **asdict(self.signals)}


def visible_text(root) -> str:
    """The text a reader sees without running scripts: invisible elements and comments removed (in place)."""
    for node in list(root.iter(*_INVISIBLE, etree.Comment)):
        node.drop_tree()  # keeps the node's tail text, which is visible
    body = root.find("body")  # the <title> and the rest of <head> are not page text
    return _SPACE.sub(" ", (body if body is not None else root).text_content()).strip()


def signals(html: bytes) -> Signals:
    """Measure a page's plain HTML; never raises (an unparsable page is all-zero with `parse_error` set)."""
    size = len(html)
    try:
        root = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError) as exc:
        return Signals(size, 0, 0.0, 0, "", "", False, parse_error=f"{type(exc).__name__}: {exc}")
    scripts = len(root.xpath("//script"))
    mount = ""
    for mount_id in MOUNT_IDS:
        found = root.xpath("//*[@id=$i]", i=mount_id)
        if found and not _SPACE.sub("", found[0].text_content()) and not found[0].xpath(".//img|.//iframe"):
            mount = mount_id
            break
    bootstrap = next((m.decode() for m in BOOTSTRAP_MARKERS if m in html), "")
    noscript = _SPACE.sub(" ", " ".join(n.text_content() for n in root.iter("noscript"))).strip()
    asks_js = bool(_NOSCRIPT_ASKS_JS.search(noscript))
    text = visible_text(root)
    return Signals(size, len(text), round(len(text) / size, 5) if size else 0.0, scripts, mount, bootstrap, asks_js,
                   len(noscript))


def decide(sig: Signals, cfg: RenderConfig, host_verdict: str = "") -> Decision:
    """The rule (conf/crawl.yaml `render:`).  `host_verdict` comes from HostMemory: "render", "skip" or ""."""
    if sig.parse_error:
        return Decision(False, "unparsable", sig)
    if sig.scripts == 0:
        return Decision(False, "no_scripts", sig)
    if host_verdict == "skip":
        return Decision(False, "host_renders_useless", sig)
    if host_verdict == "render":
        return Decision(True, "host_needs_render", sig)
    # text served for readers without JavaScript is text an extractor gets without a browser
    text = sig.visible_chars + (sig.noscript_chars if sig.noscript_chars >= cfg.thin_text_chars else 0)
    spa_thin = text < cfg.spa_text_chars
    if sig.empty_mount and spa_thin:
        return Decision(True, "empty_mount", sig)
    if sig.bootstrap and spa_thin:
        return Decision(True, "bootstrap", sig)
    if sig.noscript_asks_js and spa_thin:
        return Decision(True, "noscript", sig)
    if sig.html_bytes >= cfg.min_html_bytes and (text < cfg.thin_text_chars or text / sig.html_bytes < cfg.min_text_ratio):
        return Decision(True, "thin_text", sig)
    return Decision(False, "enough_text", sig)


def needs_render(html: bytes, cfg: RenderConfig, host_verdict: str = "") -> Decision:
    return decide(signals(html), cfg, host_verdict)
