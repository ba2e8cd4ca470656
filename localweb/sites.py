"""The generated web: a handful of hosts under the configured domain, built once from the seed.

Every response is computed up front (except the calendar trap, which is infinite, and the
rate-limited page, which depends on how often it was asked for), so serving is a dict lookup
and the same seed always gives the same bytes.
"""
from __future__ import annotations

import random
import re
import threading
import unicodedata
from dataclasses import dataclass

from localweb.config import LocalWebConfig
from localweb.pages import Chrome, Link, render_listing, render_page
from localweb.responses import Response, html_response, problem, text_response
from localweb.calendar_trap import CalendarTrap
from localweb.js_sites import add_js_sites
from localweb.specials import add_specials
from localweb.text import TextGenerator
from localweb.truth import HostTruth, PageTruth, Truth


@dataclass(frozen=True)
class HostPlan:
    role: str
    language: str
    site_name: str
    article_path: str             # format string over {slug}
    robots: str | None            # robots.txt body; None: 404 (no robots.txt)
    robots_status: int = 200
    disallowed_link: Link | None = None   # a nav link into a Disallowed path (the page exists: 200)


# Roles and their quirks are what the tests pin down, so they live in code; sizes live in conf.
CONTENT_HOSTS = (
    HostPlan("news", "en", "The Weblm Gazette", "/articles/{slug}.html",
             "User-agent: *\nDisallow: /private/\n", disallowed_link=Link("/private/staff.html", "Staff area")),
    HostPlan("blog", "en", "Field Notes", "/posts/{slug}/",
             "User-agent: *\nCrawl-delay: {crawl_delay}\nDisallow: /drafts/\n",
             disallowed_link=Link("/drafts/next-post/", "Drafts")),
    HostPlan("wiki", "de", "Weblm-Wiki", "/wiki/{slug}",
             "User-agent: BadBot\nDisallow: /\n\nUser-agent: *\nDisallow: /Spezial/\n",
             disallowed_link=Link("/Spezial/Zufall", "Zufälliger Artikel")),
    HostPlan("forum", "fr", "Le Forum Weblm", "/sujet/{slug}",
             "User-agent: *\nDisallow: /admin/\n", disallowed_link=Link("/admin/", "Modération")),
    HostPlan("shop", "es", "Tienda Weblm", "/producto/{slug}.html",
             "User-agent: *\nDisallow: /cart/\nDisallow: /checkout/\n",
             disallowed_link=Link("/checkout/", "Caja")),
)
MIRROR = HostPlan("mirror", "en", "Mirror Archive", "/copy/{slug}.html", None, robots_status=404)
EVENTS = HostPlan("events", "en", "Weblm Events", "/calendar/{slug}", "User-agent: *\nDisallow:\n")
# robots.txt answers 500: RFC 9309 §2.3.1.4 says assume complete disallow, so a polite crawl fetches nothing else here.
STATUS = HostPlan("status", "en", "Weblm Status", "/incident/{slug}", None, robots_status=500)


@dataclass
class Article:
    host: str
    path: str
    title: str
    paragraphs: list[str]
    language: str
    byline: str

    @property
    def url(self) -> str:
        return f"http://{self.host}{self.path}"


def slugify(text: str, number: int) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:48] + f"-{number}"


def robots_allows(host: HostTruth, path: str) -> bool | None:
    """Our own reading of the `*` group: good enough for ground truth, not a robots parser."""
    if host.robots_status >= 500:
        return None          # RFC 9309 §2.3.1.4 says assume disallow; crawlers differ, so truth says "unknown"
    return not any(d and path.startswith(d) for d in host.disallow)


class GeneratedWeb:
    def __init__(self, cfg: LocalWebConfig):
        self.cfg = cfg
        self.truth = Truth(seed=cfg.seed)
        self.routes: dict[tuple[str, str], Response] = {}
        self.chrome: dict[str, Chrome] = {}
        self.plans: dict[str, HostPlan] = {}
        self.rate_limited: dict[tuple[str, str], tuple[int, Response]] = {}
        self._rate_counts: dict[tuple[str, str], int] = {}
        self._rate_lock = threading.Lock()
        self.hosts = [self.host(p.role) for p in (*CONTENT_HOSTS, MIRROR, EVENTS, STATUS)]
        self._build()

    # ---- names -------------------------------------------------------------------------
    def host(self, role: str) -> str:
        return f"{role}.{self.cfg.domain}"

    def rng(self, *parts: object) -> random.Random:
        # A string seed is hashed with SHA-512 by `random`, so this is stable across runs and PYTHONHASHSEED.
        return random.Random(":".join(map(str, (self.cfg.seed, *parts))))

    @property
    def seeds(self) -> list[str]:
        return [f"http://{h}/" for h in self.hosts]

    # ---- serving -----------------------------------------------------------------------
    def knows(self, host: str) -> bool:
        return host in self.plans

    def respond(self, host: str, target: str) -> Response:
        key = (host, target)
        if key in self.rate_limited:
            limit, final = self.rate_limited[key]
            with self._rate_lock:
                self._rate_counts[key] = seen = self._rate_counts.get(key, 0) + 1
            if seen <= limit:
                refused = problem(429, "Too Many Requests",
                                  f"request {seen} of the first {limit} to this page is refused on purpose; "
                                  f"retry after {self.cfg.retry_after_seconds} s")
                return Response(429, refused.headers + (("Retry-After", str(self.cfg.retry_after_seconds)),),
                                refused.body)
            return final
        if key in self.routes:
            return self.routes[key]
        if (host, target.split("?", 1)[0]) in self.routes:  # a query the route ignores (a cache-buster), as servers do
            return self.routes[(host, target.split("?", 1)[0])]
        if self.plans[host] is EVENTS and target.startswith(self.trap.prefix):
            page = self.trap.respond(target)
            if page is not None:
                return page
        return problem(404, "Not Found", f"http://{host}{target} is not a page of this generated site")

    # ---- building ----------------------------------------------------------------------
    def add(self, page: PageTruth, response: Response) -> None:
        path = page.url.split(page.host, 1)[1]
        page.robots_allowed = robots_allows(self.truth.hosts[page.host], path.split("?")[0])
        self.truth.pages[page.url] = page
        self.routes[(page.host, path)] = response

    def _build(self) -> None:
        cfg = self.cfg
        footer_hosts = tuple(Link(f"http://{h}/", h) for h in self.hosts)
        for plan in (*CONTENT_HOSTS, MIRROR, EVENTS, STATUS):
            host = self.host(plan.role)
            self.plans[host] = plan
            nav = [Link(f"http://{host}/", "Home")]
            if plan.disallowed_link:
                nav.append(Link(f"http://{host}{plan.disallowed_link.href}", plan.disallowed_link.text))
            self.chrome[host] = Chrome(plan.site_name, plan.language, tuple(nav),
                                       footer_hosts + (Link(f"http://{host}/about.html", "About"),))
            disallow = [line.split(":", 1)[1].strip() for line in (plan.robots or "").split("User-agent: *")[-1].splitlines()
                        if line.startswith("Disallow:")] if plan.robots else []
            self.truth.hosts[host] = HostTruth(
                host, plan.language, plan.role, plan.robots_status, [d for d in disallow if d],
                crawl_delay=cfg.crawl_delay_seconds if plan.robots and "Crawl-delay" in plan.robots else None,
                trap_prefix="/calendar/" if plan is EVENTS else None)
            if plan.robots is not None:
                self.routes[(host, "/robots.txt")] = text_response(
                    plan.robots.format(crawl_delay=cfg.crawl_delay_seconds))
            elif plan.robots_status >= 500:
                self.routes[(host, "/robots.txt")] = problem(
                    plan.robots_status, "Internal Server Error", "robots.txt backend failed (deliberately)")
            self._about(host, plan)

        articles = {self.host(p.role): self._articles(p) for p in CONTENT_HOSTS}
        for host, items in articles.items():
            others = [a for h, more in articles.items() if h != host for a in more]
            for i, article in enumerate(items):
                self._render_article(article, items, others, gzipped=self._gzipped(host, i))
        specials = add_specials(self, articles)
        for host, items in articles.items():
            self._indexes(host, items, specials.get(host, []))
        self._mirror(articles)
        self.trap = CalendarTrap(self, self.host(EVENTS.role))
        self._events_home()
        self._status_home()
        if self.cfg.js_hosts:  # pages whose text appears only after JavaScript runs (issue 10)
            self.hosts += add_js_sites(self)

    def _gzipped(self, host: str, i: int) -> bool:
        return self.plans[host].role == "wiki" and self.cfg.gzip_every > 0 and i % self.cfg.gzip_every == 0

    def _articles(self, plan: HostPlan) -> list[Article]:
        host = self.host(plan.role)
        out = []
        for i in range(self.cfg.pages_per_host):
            gen = TextGenerator(plan.language, self.rng(host, "article", i))
            title = gen.title()
            slug = slugify(title, i)
            if plan.role == "wiki":
                slug = slug.replace("-", "_").capitalize()
            out.append(Article(host, plan.article_path.format(slug=slug), title, gen.paragraphs(self.cfg),
                               plan.language, f"{gen.rng.choice(gen.lexicon.subjects)}, 2024-{1 + i % 12:02d}-{1 + i % 28:02d}"))
        return out

    def _render_article(self, article: Article, same_host: list[Article], others: list[Article],
                        gzipped: bool = False) -> None:
        rng = self.rng(article.host, "links", article.path)
        related = rng.sample([a for a in same_host if a is not article], min(self.cfg.related_links, len(same_host) - 1))
        elsewhere = rng.sample(others, min(self.cfg.cross_host_links, len(others)))
        extra = ""
        if self.plans[article.host].role == "shop":
            # Every product links into the Disallowed cart, as real shops do.
            number = article.path.rsplit("-", 1)[-1].split(".")[0]
            cart = f"/cart/add?item={number}"
            extra = f'<p class="buy"><a href="http://{article.host}{cart}">Añadir al carrito</a></p>\n'
            self.add(PageTruth(f"http://{article.host}{cart}", article.host, 200, "private", "Carrito", "es",
                               "Su carrito está vacío."),
                     html_response(render_page(self.chrome[article.host], "Carrito", ["Su carrito está vacío."])))
        page = render_page(self.chrome[article.host], article.title, article.paragraphs, byline=article.byline,
                           related=[Link(a.url, a.title) for a in related],
                           elsewhere=[Link(a.url, a.title) for a in elsewhere], extra_html=extra)
        self.add(PageTruth(article.url, article.host, 200, "article", article.title, article.language,
                           "\n\n".join(article.paragraphs), content_encoding="gzip" if gzipped else None),
                 html_response(page, gzipped=gzipped))

    def _about(self, host: str, plan: HostPlan) -> None:
        gen = TextGenerator(plan.language, self.rng(host, "about"))
        paragraphs = [gen.paragraph(2, 3)]
        title = plan.site_name
        self.add(PageTruth(f"http://{host}/about.html", host, 200, "about", title, plan.language, paragraphs[0]),
                 html_response(render_page(self.chrome[host], title, paragraphs)))
        if plan.disallowed_link:
            text = gen.paragraph(2, 3)
            self.add(PageTruth(f"http://{host}{plan.disallowed_link.href}", host, 200, "private",
                               plan.disallowed_link.text, plan.language, text),
                     html_response(render_page(self.chrome[host], plan.disallowed_link.text, [text])))

    def _indexes(self, host: str, items: list[Article], special_links: list[Link]) -> None:
        size = self.cfg.index_page_size
        pages = [items[i:i + size] for i in range(0, len(items), size)]
        paths = ["/"] + [f"/page/{n}" for n in range(2, len(pages) + 1)]
        for n, (path, chunk) in enumerate(zip(paths, pages)):
            pager = ([Link(f"http://{host}{paths[n - 1]}", "«")] if n else []) + \
                    ([Link(f"http://{host}{paths[n + 1]}", "»")] if n + 1 < len(pages) else [])
            title = self.plans[host].site_name + (f" ({n + 1})" if n else "")
            body = render_listing(self.chrome[host], title,
                                  [(Link(a.url, a.title), a.paragraphs[0].split(". ")[0] + ".") for a in chunk],
                                  pager=pager, extra_links=special_links if n == 0 else [])
            self.add(PageTruth(f"http://{host}{path}", host, 200, "index", title, self.plans[host].language),
                     html_response(body))

    def _mirror(self, articles: dict[str, list[Article]]) -> None:
        cfg, host = self.cfg, self.host(MIRROR.role)
        rng = self.rng(host, "sources")
        pool = [a for items in articles.values() for a in items]
        sources = rng.sample(pool, min(len(pool), cfg.mirror_exact + cfg.mirror_near))
        entries = []
        for n, source in enumerate(sources):
            original = self.truth.pages[source.url]
            if n < cfg.mirror_exact:
                url = f"http://{host}/copy/{n}.html"
                self.add(PageTruth(url, host, 200, "mirror-exact", original.title, original.language, original.text,
                                   duplicate_of=source.url, duplicate_kind="exact",
                                   content_encoding=original.content_encoding),
                         self.routes[(source.host, source.path)])
            else:
                url = f"http://{host}/near/{n}.html"
                gen = TextGenerator(source.language, self.rng(host, "near", n))
                paragraphs, changed = gen.near_duplicate(source.paragraphs, cfg.near_dup_changed_words)
                self.add(PageTruth(url, host, 200, "mirror-near", source.title, source.language, "\n\n".join(paragraphs),
                                   duplicate_of=source.url, duplicate_kind="near", changed_words=changed),
                         html_response(render_page(self.chrome[host], source.title, paragraphs,
                                                   language=source.language)))
            entries.append((Link(url, source.title), f"copied from {source.url}"))
        self.add(PageTruth(f"http://{host}/", host, 200, "index", MIRROR.site_name, "en"),
                 html_response(render_listing(self.chrome[host], MIRROR.site_name, entries)))

    def _status_home(self) -> None:
        host = self.host(STATUS.role)
        gen = TextGenerator("en", self.rng(host, "home"))
        title, text = gen.title(), gen.paragraph(3, 5)
        incident = f"http://{host}/incident/latest"
        self.add(PageTruth(incident, host, 200, "article", title, "en", text),
                 html_response(render_page(self.chrome[host], title, [text])))
        self.add(PageTruth(f"http://{host}/", host, 200, "index", STATUS.site_name, "en"),
                 html_response(render_page(self.chrome[host], STATUS.site_name, [gen.paragraph(2, 3)],
                                           extra_html=f'<p><a href="{incident}">Latest incident</a></p>\n')))

    def _events_home(self) -> None:
        host = self.host(EVENTS.role)
        gen = TextGenerator("en", self.rng(host, "home"))
        text = gen.paragraph(2, 3)
        start = self.trap.url(*self.trap.start)
        self.add(PageTruth(f"http://{host}/", host, 200, "index", EVENTS.site_name, "en", text),
                 html_response(render_page(self.chrome[host], EVENTS.site_name, [text],
                                           extra_html=f'<p><a href="{start}">Calendar</a></p>\n')))
        self.trap.add_start_truth()
