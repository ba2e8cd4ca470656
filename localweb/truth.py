"""Ground truth about the generated web: what every URL should return and contain."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class PageTruth:
    url: str
    host: str
    status: int                          # the status a plain GET gets (rate-limited page: after its 429s)
    kind: str                            # article, index, about, private, mirror-exact, mirror-near, error, ...
    title: str | None = None             # the <h1> of the article (the <title> adds " | <site name>")
    language: str | None = None          # ISO 639-1 of the main text
    text: str | None = None              # main text: the <article>'s paragraphs joined by blank lines (no title)
    duplicate_of: str | None = None      # for mirror pages: the URL whose page this copies
    duplicate_kind: str | None = None    # "exact" (byte-identical body) or "near" (a few words changed)
    changed_words: int = 0               # near duplicates: how many words differ from duplicate_of's text
    robots_allowed: bool | None = True   # by the host's robots.txt for "*"; None where robots.txt is a 5xx
    encoding: str | None = "utf-8"       # charset the body bytes are really in
    declared_charset: str | None = "utf-8"   # charset in Content-Type (None: none declared)
    content_encoding: str | None = None  # "gzip" where the body is served compressed
    redirect_to: str | None = None       # Location of 3xx answers
    note: str | None = None              # why this page is special


@dataclass
class HostTruth:
    host: str
    language: str
    role: str                            # news, blog, wiki, forum, shop, mirror, events
    robots_status: int                   # status of /robots.txt
    disallow: list[str] = field(default_factory=list)   # Disallow prefixes for User-agent: *
    crawl_delay: float | None = None
    trap_prefix: str | None = None       # paths under this prefix are infinitely many (calendar trap)


@dataclass
class Truth:
    seed: int
    pages: dict[str, PageTruth] = field(default_factory=dict)
    hosts: dict[str, HostTruth] = field(default_factory=dict)

    def __getitem__(self, url: str) -> PageTruth:
        return self.pages[url]

    def __contains__(self, url: object) -> bool:
        return url in self.pages

    def __iter__(self) -> Iterator[str]:
        return iter(self.pages)

    def __len__(self) -> int:
        return len(self.pages)

    def by_kind(self, kind: str) -> list[PageTruth]:
        return [p for p in self.pages.values() if p.kind == kind]

    def duplicates(self) -> dict[str, str]:
        """copy URL -> original URL, exact and near."""
        return {p.url: p.duplicate_of for p in self.pages.values() if p.duplicate_of}

    def as_dict(self) -> dict:
        return {"seed": self.seed,
                "hosts": {h: dataclasses.asdict(t) for h, t in self.hosts.items()},
                "pages": {u: dataclasses.asdict(p) for u, p in self.pages.items()}}

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
