"""A host's site-wide text-and-data-mining reservations: W3C TDMRep's `/.well-known/tdmrep.json`.

The file is a JSON array of rules, each `{"location": <path pattern>, "tdm-reservation": 0 or 1, "tdm-policy": <URL>}`.
A page's path is matched against the locations in order and the first that matches decides (the report: "the most
specific match is the first in sequence"); `tdm-reservation: 1` reserves the page, 0 does not, and any other value is
a protocol error read as unset.  Locations use robots.txt's pattern syntax (TDMRep points to draft-koster-rep, now
RFC 9309 §2.2.3): `*` is any run of characters, a final `$` ends the path, and the match starts at the path's first
character; percent-escapes are decoded on both sides before comparing.  A file that is not such an array declares
nothing.

Shared by the crawl and the lake (like `storage`): the file's format is the seam, these rules read it the same way on
both sides.  The crawl asks each host for its file with its robots.txt (spider: `frontier.tdmrep`); with `respect` it
leaves the pages the file reserves unfetched, and either way it archives the answer.  Extract joins the latest definite
answer per origin (a 200, or a 4xx: no file; a 5xx says nothing and the answer before it stands) to the origin's pages
(jobs/extract.py), so it works for any WARC source that holds the file; a newer answer re-flags the pages already
extracted.
"""
from __future__ import annotations

import functools
import json
import re
from urllib.parse import unquote, urlsplit

WELL_KNOWN = "/.well-known/tdmrep.json"
RESERVED = "tdmrep.json"   # silver.documents.opt_out when the host's file reserves the page


@functools.lru_cache(maxsize=256)
def parse_rules(body: bytes) -> tuple[tuple[re.Pattern, int | None], ...] | None:
    """The file's rules in order as (location pattern, reservation 0/1 or None when unset); None when `body` is not
    a JSON array.  A rule without a string location is skipped.  Cached: every page of a host carries the same bytes;
    256 files at most, because a file may be as large as the crawl keeps (frontier.robots_max_bytes, 500 KiB), and a
    miss costs only a re-parse."""
    rules = _rules(body)
    return None if rules is None else tuple((_pattern(location), value) for location, value, _ in rules)


def _rules(body: bytes) -> list[tuple[str, int | None, str | None]] | None:
    """The file's rules in order as (location, reservation 0/1 or None when unset, tdm-policy or None); None when
    `body` is not a JSON array.  A rule without a string location is skipped."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError, RecursionError):   # not JSON or not UTF-8, or nested past the parser's depth
        return None
    if not isinstance(data, list):
        return None
    rules = []
    for rule in data:
        if not isinstance(rule, dict) or not isinstance(rule.get("location"), str):
            continue
        value = rule.get("tdm-reservation")
        value = int(value) if str(value).strip() in ("0", "1") else None
        policy = rule.get("tdm-policy")
        rules.append((rule["location"], value, policy.strip() or None if isinstance(policy, str) else None))
    return rules


def reservations(body: bytes | None) -> list[tuple[str, str | None]]:
    """The locations the file reserves, in order, each with its `tdm-policy` (where the publisher says how to license
    the mining, a URL; None when it gives none): what the report lists per host."""
    rules = _rules(bytes(body)) if body is not None else None
    return [(location, policy) for location, value, policy in rules or () if value == 1]


def _pattern(location: str) -> re.Pattern:
    """A robots.txt-style path pattern as a regex anchored at the path's start.  protego matches these patterns only
    inside its robots.txt parser (no public matcher), so the few lines are here."""
    location = unquote(location.strip())
    end = location.endswith("$")
    body = ".*".join(re.escape(part) for part in (location[:-1] if end else location).split("*"))
    return re.compile(body + (r"\Z" if end else ""), re.S)


def declares(body: bytes) -> bool:
    """Whether a tdmrep.json answer is the JSON array of rules TDMRep defines (the crawl counts the others)."""
    return parse_rules(bytes(body)) is not None


def reserved(body: bytes | None, url: str) -> bool:
    """Whether the host's tdmrep.json (`body`, its bytes as served; None: none known) reserves TDM on `url`."""
    if body is None:
        return False
    rules = parse_rules(bytes(body))
    if not rules:
        return False
    parts = urlsplit(url)
    path = unquote(parts.path or "/") + (f"?{unquote(parts.query)}" if parts.query else "")
    for pattern, value in rules:
        if pattern.match(path):
            return value == 1
    return False

