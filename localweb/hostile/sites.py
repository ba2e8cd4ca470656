"""`HostileWeb`: the 26 hosts of the adversarial web, what each one answers, and its ground truth.

Each host has one behaviour (its `Site.behaviour` line), so a judge's per-host numbers say which
behaviour a crawler got wrong.  Pages are rendered once at start; only the session links, the
calendar trap and the Retry-After counters are computed per request.
"""
from __future__ import annotations

import dataclasses
import random
import re
import threading
from collections import Counter

from localweb.hostile import broken
from localweb.hostile.config import HostileConfig
from localweb.hostile.pages import Page, Site, canonical_target, render, tree_site
from localweb.hostile.truth import Truth, build_truth
from localweb.responses import Response, problem, redirect, text_response
from localweb.text import TextGenerator

ALLOW_ALL = "User-agent: *\nDisallow:\n"
PRIVATE = "User-agent: *\nDisallow: /private/\n"
MONTH = re.compile(r"^/calendar/(\d{4})/(\d{2})$")
REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class HostileWeb:
    def __init__(self, cfg: HostileConfig):
        self.cfg = cfg
        self.sites: dict[str, Site] = {}
        self._requests: Counter = Counter()    # (host, target) -> requests seen: Retry-After pages and session ids
        self._lock = threading.Lock()
        self._build()
        self.truth: Truth = build_truth(self.sites, self.seeds)

    # ---- names -----------------------------------------------------------------------------
    def host(self, name: str) -> str:
        return f"{name}.{self.cfg.domain}"

    def rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(map(str, (self.cfg.seed, *parts))))   # str seeds hash stably (SHA-512)

    @property
    def hosts(self) -> list[str]:
        return list(self.sites)

    @property
    def seeds(self) -> list[str]:
        return [f"http://{host}/" for host in self.sites]

    def knows(self, host: str) -> bool:
        return host in self.sites

    # ---- serving ---------------------------------------------------------------------------
    def respond(self, host: str, target: str) -> Response | None:
        """The answer for http://host/target; None for a host this web does not serve."""
        site = self.sites.get(host)
        if site is None:
            return None
        if site.alias_of:
            site = self.sites[site.alias_of]   # same pages and robots.txt, links relative: the crawler stays on its alias
        with self._lock:
            self._requests[(host, target)] += 1
            seen = self._requests[(host, target)]
        if target in site.limited and seen <= self.cfg.refusals:
            refused = problem(site.limited_status, REASONS[site.limited_status],
                              f"request {seen} of the first {self.cfg.refusals} to this page is refused on purpose; "
                              f"retry after {self.cfg.retry_after_s} s")
            return Response(refused.status, refused.headers + (("Retry-After", str(self.cfg.retry_after_s)),),
                            refused.body)
        if site.session_links and target not in site.robots_paths:
            return self._session_page(site, host, target, seen)
        answer = site.routes.get(target)
        if answer is None and site.trap_prefix and target.startswith(site.trap_prefix):
            answer = self._month(site, target)
        return answer or problem(404, "Not Found", f"http://{host}{target} is not a page of this generated site")

    def _session_page(self, site: Site, host: str, target: str, seen: int) -> Response:
        page = site.pages.get(canonical_target(target))
        if page is None:
            return problem(404, "Not Found", f"http://{host}{target} is not a page of this generated site")
        rng = self.rng("session", host, target, seen)   # a fresh id on every view: a naive crawler never runs out of URLs

        def decorate(link: str) -> str:
            sid = f"{rng.getrandbits(64):016x}"
            return rng.choice((f"{link}?sid={sid}", f"{link};jsessionid={sid.upper()}",
                               f"{link}?utm_source=newsletter&utm_medium=email&utm_campaign={sid[:6]}",
                               f"{link}?utm_source={rng.choice(('feed', 'social', 'partner'))}&sid={sid}"))
        return render(site, page, decorate)

    def _month(self, site: Site, target: str) -> Response | None:
        match = MONTH.match(target)
        if not match or not (1 <= int(match[1]) <= 9998 and 1 <= int(match[2]) <= 12):
            return None
        return render(site, self._month_page(site, int(match[1]), int(match[2])))

    def _month_page(self, site: Site, year: int, month: int) -> Page:
        prev_ym = (year, month - 1) if month > 1 else (year - 1, 12)
        next_ym = (year, month + 1) if month < 12 else (year + 1, 1)
        gen = TextGenerator("en", self.rng("calendar", year, month))
        return Page(f"Events in {year:04d}/{month:02d}",
                    ("/", *(f"/calendar/{y:04d}/{m:02d}" for y, m in (prev_ym, next_ym))), (gen.paragraph(2, 3),),
                    kind="trap")

    # ---- building --------------------------------------------------------------------------
    def _site(self, name: str, behaviour: str, robots: str | None, outcome: str = "rules", pages: int = 0,
              **fields) -> Site:
        """A link-rich site; `robots` None: robots.txt is 404 unless the caller routes it."""
        host = self.host(name)
        private = "/private/" if robots and "/private/" in robots else None
        site = Site(host, behaviour, outcome if robots is not None or outcome != "rules" else "none",
                    robots_text=robots, **fields)
        site.pages = tree_site(self.rng("tree", host), pages or self.cfg.pages_per_site, self.cfg.related_links, private)
        if robots is not None:
            site.routes["/robots.txt"] = text_response(robots)
        self.sites[host] = site
        return site

    def _build(self) -> None:
        cfg, small = self.cfg, self.cfg.small_site_pages
        self._ordinary_sites()
        for name, status in (("robots-500", 500), ("robots-503", 503), ("robots-429", 429)):
            site = self._site(name, f"robots.txt answers {status}: disallow all (RFC 9309 §2.3.1.4)", None,
                              "disallow_all", small)
            site.routes["/robots.txt"] = problem(status, REASONS[status], "robots.txt backend failed (deliberately)")
        site = self._site("robots-hang", f"robots.txt never answers ({cfg.hang_seconds:.0f} s): unreachable, disallow all",
                          None, "disallow_all", small)
        site.routes["/robots.txt"] = broken.never_answers(cfg.hang_seconds)
        self._robots_redirects(small)
        self._site("robots-huge", f"robots.txt of {cfg.huge_robots_bytes} bytes, its only rule near 480 KB "
                                  "(RFC 9309 §2.5: parse at least 500 KiB)", huge_robots(cfg.huge_robots_bytes), pages=small)
        site = self._site("robots-garbage", "robots.txt is 4 KiB of random bytes: no rules, allowed everywhere",
                          None, "none", small)
        site.routes["/robots.txt"] = Response(200, (("Content-Type", "text/plain"),),
                                              self.rng("garbage").randbytes(4096))
        delay = f"{cfg.crawl_delay_s:g}"
        self._site("crawl-delay", f"robots.txt Crawl-delay: {delay} (above a 1 s delay)",
                   f"User-agent: *\nCrawl-delay: {delay}\nDisallow: /private/\n", crawl_delay=cfg.crawl_delay_s)
        for name, status in (("rate-limited", 429), ("unavailable", 503)):
            site = self._site(name, f"{cfg.limited_pages} pages answer {status} + Retry-After {cfg.retry_after_s} s "
                                    f"to their first {cfg.refusals} requests", ALLOW_ALL,
                              limited_status=status, retry_after_s=float(cfg.retry_after_s))
            site.limited = tuple(list(site.pages)[1:1 + cfg.limited_pages])
        self._site("slow", f"every page answers after {cfg.slow_seconds:g} s", ALLOW_ALL, pages=cfg.slow_pages,
                   page_delay_s=cfg.slow_seconds)
        self._calendar(small)
        self._site("session", "every link carries a fresh ?sid=, ;jsessionid= or utm_ tag", ALLOW_ALL,
                   pages=cfg.session_pages, session_links=True)
        alias = self._site("alias", "serves the same pages as www.alias (relative links)", PRIVATE, pages=small)
        self.sites[self.host("www.alias")] = dataclasses.replace(
            alias, host=self.host("www.alias"), behaviour=f"an alias of {alias.host}", pages={}, routes={},
            alias_of=alias.host)
        self._broken(small)
        self._redirects(small)
        for site in self.sites.values():
            self._render(site)

    def _ordinary_sites(self) -> None:
        self._site("news", "link-rich; robots.txt Disallow: /private/", PRIVATE)
        self._site("blog", "link-rich; robots.txt Disallow: /private/ and /drafts/", PRIVATE + "Disallow: /drafts/\n")
        self._site("wiki", "robots.txt: a weblm-spider group (Disallow /private/) and a * group (Disallow /)",
                   "User-agent: weblm-spider\nDisallow: /private/\n\nUser-agent: *\nDisallow: /\n")
        shop = self._site("shop", "every page links a ?sort=price copy, Disallow: /*?sort= (wildcard)",
                          PRIVATE + "Disallow: /*?sort=\n")
        for target, page in list(shop.pages.items()):
            if page.kind == "page":
                page.links += (f"{target}?sort=price",)
                shop.pages[f"{target}?sort=price"] = dataclasses.replace(page, kind="private")
        forum = self._site("forum", "Allow: /private/open/ inside Disallow: /private/ (the longest match wins)",
                           "User-agent: *\nAllow: /private/open/\nDisallow: /private/\n")
        forum.pages["/private/open/faq.html"] = Page("FAQ", ("/",), ("Questions anyone may read.",))
        forum.pages["/"].links += ("/private/open/faq.html",)
        self._site("docs", "no robots.txt (404): allowed everywhere", None)
        self._site("museum", "robots.txt with an empty Disallow: allowed everywhere", ALLOW_ALL)
        self._site("library", "link-rich; robots.txt Disallow: /private/ and a Sitemap line",
                   PRIVATE + f"Sitemap: http://{self.host('library')}/sitemap.xml\n")

    def _robots_redirects(self, small: int) -> None:
        site = self._site("robots-chain", "robots.txt redirects twice (301, 302), then 200 with Disallow: /private/",
                          PRIVATE, pages=small, robots_paths=("/robots.txt", "/robots-moved.txt", "/robots-final.txt"))
        site.routes.update({"/robots.txt": redirect(301, site.url("/robots-moved.txt")),
                            "/robots-moved.txt": redirect(302, site.url("/robots-final.txt")),
                            "/robots-final.txt": text_response(PRIVATE)})
        site = self._site("robots-loop", "robots.txt redirects in a loop: unavailable, allowed everywhere "
                                         "(RFC 9309 §2.3.1.2)", None, "none", small,
                          robots_paths=("/robots.txt", "/robots-loop.txt"))
        site.routes.update({"/robots.txt": redirect(301, site.url("/robots-loop.txt")),
                            "/robots-loop.txt": redirect(301, site.url("/robots.txt"))})

    def _calendar(self, small: int) -> None:
        site = self._site("calendar", "a calendar trap: every month links to the next and previous month",
                          ALLOW_ALL, pages=small, trap_prefix="/calendar/", trap_start=f"/calendar/{self.cfg.calendar_start}")
        year, month = map(int, self.cfg.calendar_start.split("/"))
        site.pages[site.trap_start] = dataclasses.replace(self._month_page(site, year, month), kind="trap-start")
        site.pages["/"].links += (site.trap_start,)

    def _broken(self, small: int) -> None:
        cfg = self.cfg
        site = self._site("broken", "broken answers: truncated body, bad gzip, gzip bomb, binary, 20 MB page",
                          ALLOW_ALL, pages=small)
        sample = render(site, site.pages["/"]).body
        paragraph = site.pages["/"].paragraphs[0]
        for target, answer in (("/broken/truncated.html", broken.truncated(sample)),
                               ("/broken/bad-gzip.html", broken.broken_gzip(sample)),
                               ("/broken/bomb.html", broken.gzip_bomb(cfg.bomb_bytes)),
                               ("/broken/file.bin", broken.binary(cfg.binary_bytes, f"{cfg.seed}:binary")),
                               ("/broken/enormous.html", broken.enormous(cfg.enormous_bytes, paragraph))):
            site.pages[target] = Page(target, kind="broken")
            site.routes[target] = answer
            site.pages["/"].links += (target,)

    def _redirects(self, small: int) -> None:
        site = self._site("redirects", "links through 2-hop redirect chains (301, 302) and into a redirect loop",
                          ALLOW_ALL, pages=small)
        for k in (1, 2):
            gen = TextGenerator("en", self.rng("moved", k))
            site.pages[f"/old/{k}"] = Page("old", redirect=f"/older/{k}", kind="redirect")
            site.pages[f"/older/{k}"] = Page("older", redirect=f"/moved/{k}.html", kind="redirect")
            site.pages[f"/moved/{k}.html"] = Page(gen.title(), ("/",), (gen.paragraph(2, 3),))
            site.pages["/"].links += (f"/old/{k}",)
        site.pages["/loop/a"] = Page("loop", redirect="/loop/b", kind="redirect")
        site.pages["/loop/b"] = Page("loop", redirect="/loop/a", kind="redirect")
        site.pages["/"].links += ("/loop/a",)

    def _render(self, site: Site) -> None:
        for target, page in site.pages.items():
            if target in site.routes:
                continue
            if page.redirect:
                site.routes[target] = redirect(301 if target.startswith("/old/") else 302, site.url(page.redirect))
                continue
            answer = render(site, page, relative=site.host == self.host("alias"))
            site.routes[target] = dataclasses.replace(answer, delay_seconds=site.page_delay_s)


def huge_robots(size: int) -> str:
    """Comment lines up to ~480 KB (or 4/5 of `size`), then the one rule, then more comments to `size` bytes."""
    pad = "# padding: a crawler must parse at least the first 500 KiB of robots.txt (RFC 9309 section 2.5)\n"
    rule_at = min(480_000, size * 4 // 5)
    head = pad * (rule_at // len(pad))
    body = head + PRIVATE
    return body + pad * max(0, (size - len(body)) // len(pad) + 1)
