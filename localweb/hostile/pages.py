"""The page model of the adversarial web: a site is a dict of targets (path?query) to pages.

The model, not the HTML, is what the ground truth's BFS walks, so a page's links are kept as
same-host targets; rendering turns them into `<a href>`s (absolute, or relative for alias hosts).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from html import escape
from typing import Callable

from localweb.pages import Chrome, Link, render_page
from localweb.responses import Response, html_response
from localweb.text import TextGenerator

# Query parameters and ;path parameters that carry a session or a campaign, not content.  The judge
# counts URLs that differ only by these as one page (the frontier's strip_params cover the same names).
SESSION_NAMES = ("sid", "sessionid", "session_id", "phpsessid", "jsessionid")
_PATH_SESSION = re.compile(r";(?:%s)=[^/;?]*" % "|".join(SESSION_NAMES), re.IGNORECASE)


def canonical_target(target: str) -> str:
    """`/a;jsessionid=X?utm_source=y&id=3&sid=z` -> `/a?id=3`: the page a session/tracking variant shows."""
    path, _, query = target.partition("?")
    path = _PATH_SESSION.sub("", path)
    kept = [p for p in query.split("&") if p and not _is_session_param(p.split("=", 1)[0])]
    return path + ("?" + "&".join(kept) if kept else "")


def _is_session_param(name: str) -> bool:
    name = name.lower()
    return name in SESSION_NAMES or name.startswith("utm_")


@dataclass
class Page:
    title: str
    links: tuple[str, ...] = ()        # same-host targets, in page order
    paragraphs: tuple[str, ...] = ()
    redirect: str | None = None        # a 3xx page: the target its Location names
    kind: str = "page"                 # page | private | redirect | broken | trap-start


@dataclass
class Site:
    """One host: its pages, its robots.txt, and what makes it hard (the `behaviour` line for reports)."""
    host: str
    behaviour: str
    robots_outcome: str                 # rules | none (4xx, unparseable, redirect loop) | disallow_all (5xx, 429, unreachable)
    robots_text: str | None = None      # the rules a crawler should apply (the final file for a redirect chain)
    robots_paths: tuple[str, ...] = ("/robots.txt",)   # targets asked while reading robots.txt (redirect hops)
    pages: dict[str, Page] = field(default_factory=dict)
    routes: dict[str, Response] = field(default_factory=dict)   # fixed answers: robots.txt, its hops, broken pages
    crawl_delay: float | None = None
    retry_after_s: float | None = None
    alias_of: str | None = None         # serves the pages of this host (relative links keep a crawler on its alias)
    page_delay_s: float = 0.0           # every page answers after this long (the slow host)
    limited: tuple[str, ...] = ()       # pages refused with 429/503 + Retry-After for their first requests
    limited_status: int = 0
    session_links: bool = False         # every link carries a fresh session id or campaign tag
    trap_prefix: str | None = None      # the calendar: /calendar/YYYY/MM forever
    trap_start: str | None = None

    def url(self, target: str) -> str:
        return f"http://{self.host}{target}"


def tree_target(i: int, depth: int) -> str:
    if i == 0:
        return "/"
    return {1: f"/section/{i}/", 2: f"/topic/{i}.html", 3: f"/article/{i}.html"}.get(depth, f"/comments/{i}.html")


def tree_site(rng: random.Random, n: int, related: int, private: str | None = None) -> dict[str, Page]:
    """n pages, home with 3 children and every other page 2: 40 pages reach depth 4.

    Extra links go only to pages no deeper than the page itself, so depth is set by the tree alone.
    `private`: a robots-disallowed area the home page and every 4th page link into (pages answer 200).
    """
    parent = [0] + [0 if i <= 3 else (i - 2) // 2 for i in range(1, n)]
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parent[i]] + 1
    targets = [tree_target(i, depth[i]) for i in range(n)]
    pages: dict[str, Page] = {}
    for i in range(n):
        gen = TextGenerator("en", random.Random(rng.random()))
        children = [targets[j] for j in range(1, n) if parent[j] == i]
        shallower = [targets[j] for j in range(n) if j != i and depth[j] <= depth[i] and targets[j] not in children]
        links = (["/"] if i else []) + children + rng.sample(shallower, min(related, len(shallower)))
        if private and i % 4 == 0:
            links.append(f"{private}{i}.html")
        pages[targets[i]] = Page(gen.title(), tuple(dict.fromkeys(links)), (gen.paragraph(2, 3),))
    if private:
        for i in range(0, n, 4):
            gen = TextGenerator("en", random.Random(rng.random()))
            nxt = f"{private}{i + 4}.html" if i + 4 < n else "/"
            pages[f"{private}{i}.html"] = Page(gen.title(), ("/", nxt), (gen.paragraph(1, 2),), kind="private")
    return pages


def render(site: Site, page: Page, decorate: Callable[[str], str] = lambda t: t, relative: bool = False) -> Response:
    """The page's HTML; `decorate` rewrites each link target (session ids), `relative` drops the host."""
    prefix = "" if relative else f"http://{site.host}"
    links = "".join(f'<li><a href="{escape(prefix + decorate(t))}">{escape(t)}</a></li>' for t in page.links)
    chrome = Chrome(site.host, "en", (Link(prefix + decorate("/"), "Home"),), ())
    return html_response(render_page(chrome, page.title, list(page.paragraphs),
                                     extra_html=f'<ul class="links">{links}</ul>\n'))
