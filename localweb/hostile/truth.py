"""Ground truth for judging a crawl of the adversarial web: per host, the reachable allowed pages and
the gap a polite crawler keeps.

Reachable allowed = a BFS from the seeds over the page model's links, where a robots-disallowed page
is neither counted nor expanded, a redirect is followed but not counted, session/tracking variants
count once (`canonical_target`), an alias host's pages count under the host it copies, and only the
trap's first page counts.  A host whose robots.txt is 5xx, 429 or never answers has none
(RFC 9309 §2.3.1.4: assume complete disallow).  Robots rules are read by Protego for the token
`weblm-spider`, as the crawler's own Protego parser reads them for its User-Agent.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from protego import Protego

from localweb.hostile.pages import canonical_target

if TYPE_CHECKING:
    from localweb.hostile.pages import Site

USER_AGENT = "weblm-spider"


@dataclass(frozen=True)
class HostTruth:
    host: str
    behaviour: str
    robots_outcome: str                    # rules | none | disallow_all
    robots_text: str | None
    robots_paths: tuple[str, ...]          # robots.txt and its redirect hops: robots requests, not page fetches
    crawl_delay: float | None
    retry_after_s: float | None            # 429/503 answers on this host carry Retry-After this long
    alias_of: str | None
    pages: tuple[str, ...]                 # reachable allowed canonical targets (sorted)
    disallowed: tuple[str, ...]            # reachable by links but forbidden by robots.txt (sorted)
    trap_prefix: str | None
    trap_start: str | None

    def required_gap(self, delay: float) -> float:
        """The least time between two requests to this host: the delay, or Crawl-delay when longer."""
        return max(delay, self.crawl_delay or 0.0)

    @cached_property
    def _parser(self) -> Protego | None:
        return Protego.parse(self.robots_text) if self.robots_outcome == "rules" and self.robots_text else None

    def allowed(self, target: str) -> bool:
        """May a crawler fetch `target` here?  Robots requests always; nothing on a disallow-all host."""
        if target in self.robots_paths:
            return True
        if self.robots_outcome == "disallow_all":
            return False
        parser = self._parser
        return parser is None or parser.can_fetch(f"http://{self.host}{target}", USER_AGENT)


@dataclass
class Truth:
    hosts: dict[str, HostTruth]
    seeds: list[str]

    def canonical(self, host: str, target: str) -> tuple[str, str]:
        """The page a request shows: alias hosts fold into the host they copy, session ids are dropped."""
        known = self.hosts.get(host)
        return (known.alias_of or host) if known else host, canonical_target(target)

    def reachable(self) -> set[tuple[str, str]]:
        return {(h.host, t) for h in self.hosts.values() for t in h.pages}

    def __len__(self) -> int:
        return sum(len(h.pages) for h in self.hosts.values())

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"seeds": self.seeds, "hosts": {h: asdict(t) for h, t in self.hosts.items()}},
                                         indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Truth":
        data = json.loads(Path(path).read_text())
        hosts = {}
        for host, fields in data["hosts"].items():
            fields.update({k: tuple(fields[k]) for k in ("robots_paths", "pages", "disallowed")})
            hosts[host] = HostTruth(**fields)
        return cls(hosts, data["seeds"])


def build_truth(sites: dict[str, "Site"], seeds: list[str]) -> Truth:
    def host_truth(site: "Site", pages=(), disallowed=()) -> HostTruth:
        return HostTruth(site.host, site.behaviour, site.robots_outcome, site.robots_text, tuple(site.robots_paths),
                         site.crawl_delay, site.retry_after_s, site.alias_of, tuple(sorted(pages)),
                         tuple(sorted(disallowed)), site.trap_prefix, site.trap_start)

    rules = {host: host_truth(site) for host, site in sites.items()}   # for `allowed` during the walk
    pages: dict[str, set[str]] = {host: set() for host in sites}
    disallowed: dict[str, set[str]] = {host: set() for host in sites}
    queue: deque[tuple[str, str]] = deque()
    seen: set[tuple[str, str]] = set()

    def visit(host: str, target: str) -> None:
        host = sites[host].alias_of or host
        node = (host, canonical_target(target))
        if node not in seen:
            seen.add(node)
            queue.append(node)

    for seed in seeds:
        host = seed.split("/")[2]
        visit(host, "/" + seed.split("/", 3)[3])
    while queue:
        host, target = queue.popleft()
        page = sites[host].pages.get(target)
        if page is None:
            continue   # a link to nothing (trap months past the first): not a page of the truth
        if not rules[host].allowed(target):
            disallowed[host].add(target)
            continue
        if page.redirect:
            visit(host, page.redirect)
            continue
        pages[host].add(target)
        for link in page.links:
            visit(host, link)
    return Truth({host: host_truth(site, pages[host], disallowed[host]) for host, site in sites.items()}, seeds)
