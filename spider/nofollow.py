"""A page's robots directives about its links: `<meta name="robots">` and the `X-Robots-Tag` header (Google's syntax,
which other crawlers follow), for every crawler or for ours by its user-agent token.

`nofollow` and `none` mean: follow no link of this page (Common Crawl's CCBot obeys them, and `rel="nofollow"` on a
link, which Scrapy's LinkExtractor marks as `Link.nofollow`).  The page itself is fetched and archived either way.
"""
from __future__ import annotations

import re

# directives a header value may start with that are not a user agent ("unavailable_after: 25 Jun 2030 ...")
_DIRECTIVES = {"all", "none", "noindex", "nofollow", "noarchive", "nosnippet", "notranslate", "noimageindex",
               "unavailable_after", "max-snippet", "max-image-preview", "max-video-preview", "indexifembedded",
               "noai", "noimageai"}


def agent_token(user_agent: str) -> str:
    """The product token of a User-Agent string ("weblm-spider/0.1 (+https://...)" -> "weblm-spider"), lower case."""
    return re.split(r"[/\s]", user_agent.strip(), maxsplit=1)[0].lower()


def directives(value: str) -> set[str]:
    """`"noindex, NoFollow"` -> {"noindex", "nofollow"}."""
    return {part.strip().lower() for part in value.split(",") if part.strip()}


def header_directives(values: list[str], token: str) -> set[str]:
    """The `X-Robots-Tag` values that apply to us: unprefixed ones and those prefixed with our token."""
    found: set[str] = set()
    for value in values:
        head, sep, rest = value.partition(":")
        if sep and head.strip().lower() not in _DIRECTIVES:   # "otherbot: nofollow"
            if head.strip().lower() == token:
                found |= directives(rest)
            continue
        found |= directives(value)
    return found


def meta_directives(metas: list[tuple[str, str]], token: str) -> set[str]:
    """`(name, content)` of a page's meta tags -> the directives of those named "robots" or our token."""
    found: set[str] = set()
    for name, content in metas:
        if name.strip().lower() in ("robots", token):
            found |= directives(content)
    return found


def follows_no_links(found: set[str]) -> bool:
    return bool(found & {"nofollow", "none"})


def page_nofollow(response, token: str) -> bool:
    """Whether the page's meta robots tags or its X-Robots-Tag headers forbid following its links."""
    header = [v.decode("latin-1") for v in response.headers.getlist("X-Robots-Tag")]
    metas = [(m.attrib.get("name", ""), m.attrib.get("content", ""))
             for m in response.xpath("//meta[@name and @content]")]
    return follows_no_links(header_directives(header, token) | meta_directives(metas, token))
