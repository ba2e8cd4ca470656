"""Canonical URLs and their fingerprints: one URL, one frontier entry, however a page spelled the link.

w3lib's `canonicalize_url` does the normalisation (case, percent-encoding, sorted query, no fragment); before it,
session and tracking parameters named in `frontier.strip_params` are dropped (fnmatch patterns such as `utm_*`),
and so are `;jsessionid=`-style path parameters, so trap copies of a page (`?sid=...`) collapse into one.
The URL fetched is the stripped one; the fingerprint is of its canonical form.
"""
from __future__ import annotations

import re
from fnmatch import fnmatchcase
from urllib.parse import parse_qsl, urlsplit

from scrapy.utils.url import strip_url
from w3lib.url import canonicalize_url, url_query_cleaner

from spider.frontier.bloom import fingerprint

_PATH_SESSION = re.compile(r";(?:jsessionid|phpsessid|sid|sessionid)=[^/?#]*", re.IGNORECASE)


class Canonicalizer:
    def __init__(self, strip_params: list[str]):
        self.patterns = [p.lower() for p in strip_params]

    def strip(self, url: str) -> str:
        """`url` without its fragment, path session ids and the configured query parameters."""
        url = _PATH_SESSION.sub("", url.split("#", 1)[0])
        query = urlsplit(url).query
        if not query or not self.patterns:
            return url
        names = {name for name, _ in parse_qsl(query, keep_blank_values=True)
                 if any(fnmatchcase(name.lower(), p) for p in self.patterns)}
        if not names:
            return url
        return url_query_cleaner(url, sorted(names), remove=True, unique=False, keep_fragments=False)

    def canonical(self, url: str) -> str:
        """A (stripped) URL's canonical form, its scheme's default port left out (w3lib keeps `:80`:
        `http://a.test:80/x` would be fetched beside `http://a.test/x`)."""
        return canonicalize_url(without_default_port(url))

    def key(self, url: str) -> bytes:
        """The 16-byte fingerprint of a (stripped) URL's canonical form."""
        return fingerprint(self.canonical(url))

    def id(self, url: str) -> str:
        return self.key(self.strip(url)).hex()


def without_default_port(url: str) -> str:
    """`url` without `:80` (http) or `:443` (https), by Scrapy's `strip_url`; a URL whose port is not one, as it is."""
    try:
        return strip_url(url, strip_credentials=False, strip_default_port=True, origin_only=False,
                         strip_fragment=False)
    except ValueError:
        return url


def jump_hash(key: int, buckets: int) -> int:
    """Lamping & Veach's jump consistent hash (arXiv:1406.2294): a host keeps its partition when the count grows,
    except the 1/n share that must move.  Eight lines, no maintained library offers it for Python ints."""
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941757 + 1) & 0xFFFFFFFFFFFFFFFF
        j = int((b + 1) * ((1 << 31) / ((key >> 33) + 1)))
    return b
