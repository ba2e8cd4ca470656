"""Whether a page's publisher reserved text and data mining: the machine-readable opt-outs a training corpus respects
(the EU's DSM Directive Art. 4(3) asks for them; the AI Act asks model providers to honour them).

Read per page from what the crawl archived, nothing fetched:
- TDMRep (W3C Community Group report): the `tdm-reservation: 1` HTTP header, or `<meta name="tdm-reservation"
  content="1">`;
- `noai` (DeviantArt's directive, followed by many publishers): in `X-Robots-Tag` or `<meta name="robots">`, for
  every crawler or for one of `agents` (`extract.opt_out_agents`: our crawler's token, Common Crawl's `ccbot`).

`opt_out(headers, html, agents)` gives the first signal found ("tdm-reservation" or "noai") or None.  The meta tags
are read from the page's first `HEAD_BYTES` with lxml (a `<head>` longer than that is rare; a reservation in the
body would not be machine-readable in any standard's sense).  The site-wide `/.well-known/tdmrep.json` is read by
the `tdmrep` package: extract joins each origin's file to its pages.
"""
from __future__ import annotations

HEAD_BYTES = 65536
TDM = "tdm-reservation"
NOAI = "noai"


# directives written `name: value`, so not read as a user agent's name
_VALUED = ("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview")


def _directives(value: str, agents: tuple[str, ...]) -> set[str]:
    """X-Robots-Tag or meta robots directives -> those for every crawler or one of `agents`.  Ingest joins repeated
    headers with ", ", so `"noindex, ccbot: noai, nofollow"` holds two: an agent's name starts its scope, which runs
    to the next name (Google's reading of `googlebot: noindex, nofollow`)."""
    found, ours = set(), True
    for part in value.split(","):
        head, sep, rest = part.partition(":")
        name = head.strip().lower()
        if sep and name and " " not in name and name not in _VALUED:
            ours, part = name in agents, rest
        if ours:
            found.add(part.strip().lower())
    return found


def _meta_tags(html: bytes) -> list[tuple[str, str]]:
    """(name, content) of the meta tags in the page's first HEAD_BYTES, lower-case names."""
    import lxml.html

    head = html[:HEAD_BYTES]
    if b"<meta" not in head.lower():
        return []
    try:
        root = lxml.html.document_fromstring(head)
    except Exception:  # noqa: BLE001  (lxml on a fragment it cannot read: no meta tags, as for no head)
        return []
    return [((m.get("name") or "").strip().lower(), m.get("content") or "") for m in root.iter("meta")]


def opt_out(headers: dict[str, str] | None, html: bytes | None, agents: tuple[str, ...]) -> str | None:
    """The page's opt-out from text and data mining, if any: "tdm-reservation", "noai", or None."""
    headers = headers or {}
    agents = tuple(a.lower() for a in agents)
    if (headers.get(TDM) or "").split(",")[0].strip() == "1":
        return TDM
    if NOAI in _directives(headers.get("x-robots-tag") or "", agents):
        return NOAI
    for name, content in _meta_tags(html or b""):
        if name == TDM and content.strip() == "1":
            return TDM
        # a meta tag names its agent in `name`: its content is a plain list ("noai,max-snippet:-1,index")
        if name in ("robots", *agents) and NOAI in {part.strip().lower() for part in content.split(",")}:
            return NOAI
    return None
