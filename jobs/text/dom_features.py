"""DOM features of a page's candidate lines (jobs.text.line_model): where each line sits in the page's HTML.

The Web2Text / boilerpipe / dragnet family's block features, for the lines the extractors already produced: the
page is parsed once with lxml; its text is cut into segments at block-element boundaries (and `<br>`), each
segment attributed to its nearest block ancestor, and the segments' `\\w+` words, in document order, form one
word stream.  Each candidate line is found in that stream by its words (searched forward from the previous
line's match, then from the start; a line that is not there, e.g. text the extractor glued across blocks, falls
back to its first three words, else it is "unmapped"), and takes the features of the block holding its first
word: block tag, heading level, depth, the tags and class/id keywords of its ancestors, link and text density of
the block and its parents, how many siblings share its tag and class (item grids), its position, and how much of
the extractors' kept text its parents hold (the main-content container), plus the same for its neighbours.

Not used by the extract job: the text + DOM line model stays under the job's rule on the mixed page types
(bench/extraction_dom.py holds the figures).  Hand-written, not a library: boilerpipe and dragnet are Java / unmaintained Python-2-era C extensions, and
Web2Text is a research TensorFlow model; the walk itself is lxml's.
"""
from __future__ import annotations

import math
import re
from bisect import bisect_right

import numpy as np

_WORD = re.compile(r"\w+")
SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas",
                       "math", "select", "option"})
BLOCK_TAGS = frozenset({
    "html", "body", "div", "p", "li", "ul", "ol", "dl", "dd", "dt", "td", "th", "tr", "table", "thead", "tbody",
    "tfoot", "caption", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "section", "article", "main",
    "header", "footer", "nav", "aside", "form", "fieldset", "figure", "figcaption", "address", "details",
    "summary", "hr", "center", "menu", "dialog", "legend", "output", "hgroup", "search"})
BLOCK_GROUPS = {  # one-hot of the line's block tag
    "p": ("p",), "div": ("div",), "li": ("li",), "cell": ("td", "th"), "heading": ("h1", "h2", "h3", "h4", "h5", "h6"),
    "pre": ("pre",), "quote": ("blockquote",), "def": ("dd", "dt"), "section": ("section", "article", "main"),
    "chrome": ("header", "footer", "nav", "aside", "form", "menu"), "figure": ("figure", "figcaption", "caption"),
}
ANCESTOR_TAGS = ("main", "article", "header", "nav", "footer", "aside", "form", "li", "table", "a", "button",
                 "h1", "h2", "h3", "blockquote", "pre", "figure", "label", "ul", "dl", "time")
KEYWORDS = ("nav", "menu", "footer", "header", "comment", "post", "product", "descr", "sidebar", "related",
            "breadcrumb", "cookie", "share", "social", "widget", "banner", "content", "main", "article", "entry",
            "body", "text", "title", "price", "review", "card", "item", "grid", "list", "tag", "author", "date",
            "meta", "copyright", "newsletter", "subscribe", "login", "search", "modal", "promo", "recommend",
            "hidden", "btn", "caption", "message", "thread", "reply", "detail", "faq", "feature", "hero")
_KW_RE = re.compile("|".join(KEYWORDS))
_TAG_BIT = {t: 1 << i for i, t in enumerate(ANCESTOR_TAGS)}
_KW_BIT = {k: 1 << i for i, k in enumerate(KEYWORDS)}

DOM_FEATURES = (
    "mapped", "n_blocks", "depth", "rel_depth", "heading",
    *(f"blk_{g}" for g in BLOCK_GROUPS),
    "blk_log_words", "blk_link_density", "blk_text_density", "blk_children",
    "par_log_words", "par_link_density", "par_children", "gpar_link_density", "gpar_log_words",
    "rep_self", "rep_parent", "rep_max_anc", "rep_anc_gap",
    "pos_block", "pos_line", "role_main",
    *(f"anc_{t}" for t in ANCESTOR_TAGS),
    *(f"cls_{k}" for k in KEYWORDS),
    *(f"blkcls_{k}" for k in ("nav", "menu", "comment", "post", "product", "descr", "content", "item", "card", "title", "price")),
    "rs_share_blk", "rs_share_par", "rs_share_gpar", "rs_share_anc3", "in_rs_container", "in_rs_box80",
    "in_rs_box95", "in_rp_container", "rs_container_depth_gap",
    "prev_link_density", "next_link_density", "prev_same_block", "next_same_block",
    "prev_in_rs_container", "next_in_rs_container",
)


class PageDom:
    """The page's elements in preorder (parallel lists) and its word stream, each word's block."""

    def __init__(self, html: str):
        self.tag, self.parent, self.depth, self.flags, self.kw, self.rep = [], [], [], [], [], []
        self.own_words, self.link_words, self.n_elems, self.start, self.role_main = [], [], [], [], []
        self.words: list[str] = []
        self.word_block: list[int] = []
        root = _parse(html)
        if root is not None:
            self._walk(root)
        self._totals()
        offsets, pos = [], 0
        for w in self.words:
            offsets.append(pos)
            pos += len(w) + 1
        self.offsets = offsets
        self.stream = " ".join(self.words)

    def _walk(self, root) -> None:
        buffer: list[str] = []
        owner = [-1]  # the block that the text in `buffer` belongs to

        def flush():
            if buffer:
                words = _WORD.findall("".join(buffer).lower())
                self.words.extend(words)
                self.word_block.extend([owner[0]] * len(words))
                buffer.clear()

        def add_text(text, node, in_link):
            if text:
                n = len(_WORD.findall(text))
                self.own_words[node] += n
                if in_link:
                    self.link_words[node] += n
                buffer.append(text)

        # (element, parent node, parent's block, in a link, siblings sharing its tag and class); an exit is
        # (None, node, tail, the block and link state around the node)
        stack = [(root, -1, -1, False, 1)]
        while stack:
            el, parent, block, in_link, rep = stack.pop()
            if el is None:  # leaving node `parent`: its tail goes to its parent's block
                node, tail, (outer_block, outer_link) = parent, block, in_link
                if self.tag[node] in BLOCK_TAGS:
                    flush()
                    owner[0] = outer_block
                if tail:
                    add_text(tail, self.parent[node] if self.parent[node] >= 0 else node, outer_link)
                continue
            tag = el.tag.lower() if isinstance(el.tag, str) else ""
            if not tag or tag in SKIP_TAGS:  # comments, scripts: only the tail counts
                if el.tail and parent >= 0:
                    add_text(el.tail, parent, in_link)
                continue
            node = len(self.tag)
            attrs = f"{el.get('class', '')} {el.get('id', '')}".lower()
            kw = self.kw[parent] if parent >= 0 else 0
            for m in _KW_RE.findall(attrs):
                kw |= _KW_BIT[m]
            self.tag.append(tag)
            self.parent.append(parent)
            self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
            self.flags.append((self.flags[parent] if parent >= 0 else 0) | _TAG_BIT.get(tag, 0))
            self.kw.append(kw)
            self.role_main.append((self.role_main[parent] if parent >= 0 else False) or el.get("role") == "main")
            self.own_words.append(0)
            self.link_words.append(0)
            self.n_elems.append(1)
            self.start.append(len(self.words))
            self.rep.append(rep)
            is_block = tag in BLOCK_TAGS
            link = in_link or tag == "a"
            if is_block or tag == "br":
                flush()
            if is_block:
                owner[0] = node
            add_text(el.text, node, link)
            stack.append((None, node, el.tail, (block, in_link), 0))
            kids = list(el)
            signature: dict = {}
            for c in kids:
                key = (c.tag, c.get("class"))
                signature[key] = signature.get(key, 0) + 1
            my_block = node if is_block else block
            for c in reversed(kids):
                stack.append((c, node, my_block, link, signature.get((c.tag, c.get("class")), 1)))
        flush()

    def _totals(self) -> None:
        n = len(self.tag)
        self.sub_words = list(self.own_words)
        self.sub_links = list(self.link_words)
        self.children = [0] * n
        for i in range(n - 1, 0, -1):
            p = self.parent[i]
            if p >= 0:
                self.sub_words[p] += self.sub_words[i]
                self.sub_links[p] += self.sub_links[i]
                self.n_elems[p] += self.n_elems[i]
                self.children[p] += 1

    def find(self, key: str, cursor: int) -> tuple[int, int]:
        """(first word index, word count) of `key`'s words in the stream, searched from char `cursor`; (-1, 0)."""
        if not key or not self.stream:
            return -1, 0
        needle = f" {key} "
        hay = f" {self.stream} "
        at = hay.find(needle, cursor)
        if at < 0:
            at = hay.find(needle)
        count = key.count(" ") + 1
        if at < 0 and count > 3:
            short = " ".join(key.split()[:3])
            at = hay.find(f" {short} ", cursor)
            count = 3
        if at < 0:
            return -1, 0
        return bisect_right(self.offsets, at) - 1, count


def _parse(html: str):
    import lxml.html
    from lxml import etree

    if not html or not html.strip():
        return None
    try:
        return lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):  # an empty document, or a declaration lxml refuses in a str
        try:
            return lxml.html.document_fromstring(html.encode("utf-8", "replace"))
        except (etree.ParserError, ValueError):
            return None


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def dom_features(html: str, keys: list[str], held: list[tuple[bool, ...]]) -> np.ndarray:
    """One row of `DOM_FEATURES` per candidate line (its words `keys[i]`, which extractors hold it `held[i]`,
    primary first, resiliparse second)."""
    dom = PageDom(html)
    n = len(keys)
    out = np.zeros((n, len(DOM_FEATURES)), dtype=np.float32)
    if not n:
        return out
    col = {name: i for i, name in enumerate(DOM_FEATURES)}
    nodes = len(dom.tag)
    total_words = max(len(dom.words), 1)
    max_depth = max(dom.depth, default=1) or 1
    blocks, spans, cursor = [], [], 0
    for key in keys:
        first, count = dom.find(key, cursor)
        if first < 0:
            blocks.append(-1)
            spans.append((-1, 0))
            continue
        blocks.append(dom.word_block[first])
        spans.append((first, count))
        cursor = dom.offsets[first]
    # each extractor's kept words in every subtree: where the main-content container is
    rs_words, rp_words = [0.0] * nodes, [0.0] * nodes
    for b, (first, count), h in zip(blocks, spans, held):
        if b >= 0:
            if h[0]:
                rs_words[b] += count
            if len(h) > 1 and h[1]:
                rp_words[b] += count
    for i in range(nodes - 1, 0, -1):
        p = dom.parent[i]
        if p >= 0:
            rs_words[p] += rs_words[i]
            rp_words[p] += rp_words[i]

    def container(sub, share=0.6):
        total = sub[0] if nodes else 0.0
        if not total:
            return -1
        best = 0
        for i in range(nodes):  # the deepest node holding `share` of the kept words
            if sub[i] >= share * total and dom.depth[i] > dom.depth[best]:
                best = i
        return best

    rs_box, rp_box = container(rs_words), container(rp_words)
    rs_box80, rs_box95 = container(rs_words, 0.8), container(rs_words, 0.95)
    rs_total = rs_words[0] if nodes else 0.0

    def inside(b, box):
        while b >= 0:
            if b == box:
                return True
            b = dom.parent[b]
        return False

    def ancestor(b, k):
        for _ in range(k):
            if b < 0:
                return -1
            b = dom.parent[b]
        return b

    in_box = [inside(b, rs_box) if b >= 0 and rs_box >= 0 else False for b in blocks]
    link_density = [_ratio(dom.sub_links[b], dom.sub_words[b]) if b >= 0 else -1.0 for b in blocks]
    for i, b in enumerate(blocks):
        row = out[i]
        if b < 0:
            row[:] = -1.0
            row[col["mapped"]] = 0.0
        else:
            first, count = spans[i]
            end_block = dom.word_block[min(first + count - 1, len(dom.word_block) - 1)]
            tag = dom.tag[b]
            row[col["mapped"]] = 1.0
            row[col["n_blocks"]] = float(end_block != b)
            row[col["depth"]] = dom.depth[b]
            row[col["rel_depth"]] = dom.depth[b] / max_depth
            row[col["heading"]] = int(tag[1]) if len(tag) == 2 and tag[0] == "h" and tag[1].isdigit() else 0
            for g, tags in BLOCK_GROUPS.items():
                row[col[f"blk_{g}"]] = float(tag in tags)
            row[col["blk_log_words"]] = math.log1p(dom.sub_words[b])
            row[col["blk_link_density"]] = link_density[i]
            row[col["blk_text_density"]] = dom.sub_words[b] / dom.n_elems[b]
            row[col["blk_children"]] = math.log1p(dom.children[b])
            p, g = ancestor(b, 1), ancestor(b, 2)
            if p >= 0:
                row[col["par_log_words"]] = math.log1p(dom.sub_words[p])
                row[col["par_link_density"]] = _ratio(dom.sub_links[p], dom.sub_words[p])
                row[col["par_children"]] = math.log1p(dom.children[p])
            if g >= 0:
                row[col["gpar_link_density"]] = _ratio(dom.sub_links[g], dom.sub_words[g])
                row[col["gpar_log_words"]] = math.log1p(dom.sub_words[g])
            # siblings sharing tag and class, for the block and each ancestor: an item grid repeats
            reps, a = [], b
            while a > 0:
                reps.append(dom.rep[a])
                a = dom.parent[a]
            row[col["rep_self"]] = math.log1p(reps[0]) if reps else 0.0
            row[col["rep_parent"]] = math.log1p(reps[1]) if len(reps) > 1 else 0.0
            if reps:
                top = int(np.argmax(reps))
                row[col["rep_max_anc"]] = math.log1p(reps[top])
                row[col["rep_anc_gap"]] = top
            row[col["pos_block"]] = dom.start[b] / total_words
            row[col["pos_line"]] = first / total_words
            row[col["role_main"]] = float(dom.role_main[b])
            for t, bit in _TAG_BIT.items():
                row[col[f"anc_{t}"]] = float(bool(dom.flags[b] & bit))
            for k, bit in _KW_BIT.items():
                row[col[f"cls_{k}"]] = float(bool(dom.kw[b] & bit))
            own = dom.kw[b] & ~(dom.kw[dom.parent[b]] if dom.parent[b] >= 0 else 0)
            for k in ("nav", "menu", "comment", "post", "product", "descr", "content", "item", "card", "title", "price"):
                row[col[f"blkcls_{k}"]] = float(bool(own & _KW_BIT[k]))
            row[col["rs_share_blk"]] = _ratio(rs_words[b], dom.sub_words[b])
            for name, k in (("rs_share_par", 1), ("rs_share_gpar", 2), ("rs_share_anc3", 3)):
                a = ancestor(b, k)
                row[col[name]] = _ratio(rs_words[a], rs_total) if a >= 0 else 0.0
            row[col["in_rs_container"]] = float(in_box[i])
            row[col["in_rs_box80"]] = float(inside(b, rs_box80)) if rs_box80 >= 0 else -1.0
            row[col["in_rs_box95"]] = float(inside(b, rs_box95)) if rs_box95 >= 0 else -1.0
            row[col["in_rp_container"]] = float(inside(b, rp_box)) if rp_box >= 0 else -1.0
            row[col["rs_container_depth_gap"]] = dom.depth[b] - dom.depth[rs_box] if rs_box >= 0 else -1.0
        row[col["prev_link_density"]] = link_density[i - 1] if i else -2.0
        row[col["next_link_density"]] = link_density[i + 1] if i + 1 < n else -2.0
        row[col["prev_same_block"]] = float(i > 0 and b >= 0 and blocks[i - 1] == b)
        row[col["next_same_block"]] = float(i + 1 < n and b >= 0 and blocks[i + 1] == b)
        row[col["prev_in_rs_container"]] = float(in_box[i - 1]) if i else -1.0
        row[col["next_in_rs_container"]] = float(in_box[i + 1]) if i + 1 < n else -1.0
    return out

