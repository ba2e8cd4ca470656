"""The deliberately bad responses of the generated web, each reachable by a link from its host's home page."""
from __future__ import annotations

from typing import TYPE_CHECKING

from localweb.pages import Link, render_page
from localweb.responses import Response, html_response, problem, redirect
from localweb.text import TextGenerator
from localweb.truth import PageTruth

if TYPE_CHECKING:
    from localweb.sites import Article, GeneratedWeb


def add_specials(web: "GeneratedWeb", articles: dict[str, list["Article"]]) -> dict[str, list[Link]]:
    """Register every special page; returns, per host, the links its home page must carry to them."""
    links: dict[str, list[Link]] = {}
    for host in articles:
        role = web.plans[host].role
        adder = {"news": _news, "blog": _blog, "wiki": _wiki, "forum": _forum, "shop": _shop}[role]
        links[host] = [Link(page.url, page.title or page.kind) for page in adder(web, host, articles[host])]
    return links


def _article(web: "GeneratedWeb", host: str, name: str) -> tuple[str, list[str]]:
    gen = TextGenerator(web.plans[host].language, web.rng(host, "special", name))
    return gen.title(), gen.paragraphs(web.cfg)


def _news(web, host, items):
    out = []
    for k in range(web.cfg.missing_links):
        # Never added to the routes: the generic 404 answers these.
        out.append(PageTruth(f"http://{host}/articles/removed-{k}.html", host, 404, "missing", f"Removed story {k}",
                             note="linked but never published"))
    out.append(PageTruth(f"http://{host}/broken/report.html", host, 500, "server-error", "Annual report",
                         note="always 500"))
    web.routes[(host, "/broken/report.html")] = problem(500, "Internal Server Error",
                                                        "the report generator crashed (deliberately)")
    for n, target in enumerate(items[:2]):
        out.append(PageTruth(f"http://{host}/old/{n}", host, 301, "redirect", f"Old link {n}",
                             redirect_to=target.url, note="permanent redirect to an article"))
        web.routes[(host, f"/old/{n}")] = redirect(301, target.url)
    out.append(PageTruth(f"http://{host}/latest", host, 302, "redirect", "Latest", redirect_to=items[-1].url))
    web.routes[(host, "/latest")] = redirect(302, items[-1].url)
    for page in out:
        page.robots_allowed = True
        page.encoding = page.declared_charset = "utf-8"
        web.truth.pages[page.url] = page
    return out


def _blog(web, host, items):
    chrome = web.chrome[host]
    title, paragraphs = _article(web, host, "popular")
    popular = PageTruth(f"http://{host}/popular", host, 200, "rate-limited", title, "en", "\n\n".join(paragraphs),
                        note=f"429 with Retry-After for the first {web.cfg.rate_limited_responses} requests, then 200")
    web.add(popular, html_response(render_page(chrome, title, paragraphs)))
    # Served through the rate limiter instead of the plain route table.
    web.rate_limited[(host, "/popular")] = (web.cfg.rate_limited_responses, web.routes.pop((host, "/popular")))
    title, paragraphs = _article(web, host, "slow")
    slow = PageTruth(f"http://{host}/slow", host, 200, "slow", title, "en", "\n\n".join(paragraphs),
                     note=f"answers only after {web.cfg.slow_page_seconds} s")
    page = html_response(render_page(chrome, title, paragraphs))
    web.add(slow, Response(page.status, page.headers, page.body, delay_seconds=web.cfg.slow_page_seconds))
    return [popular, slow]


def _wiki(web, host, items):
    gen = TextGenerator("de", web.rng(host, "large"))
    title = "Gesamtliste aller Artikel"
    paragraphs, size = [], 0
    while size < web.cfg.large_page_bytes:
        paragraph = gen.paragraph(web.cfg.sentences_min, web.cfg.sentences_max)
        paragraphs.append(paragraph)
        size += len(paragraph.encode("utf-8")) + 8   # + "<p></p>\n"
    large = PageTruth(f"http://{host}/wiki/Gesamtliste", host, 200, "large", title, "de", "\n\n".join(paragraphs),
                      note=f"about {web.cfg.large_page_bytes} bytes")
    web.add(large, html_response(render_page(web.chrome[host], title, paragraphs)))
    return [large]


def _forum(web, host, items):
    chrome = web.chrome[host]
    out = []
    title, paragraphs = _article(web, host, "missing-charset")
    page = PageTruth(f"http://{host}/sujet/charset-manquant", host, 200, "charset", title, "fr",
                     "\n\n".join(paragraphs), encoding="utf-8", declared_charset=None,
                     note="no charset in Content-Type nor <meta>: the bytes are UTF-8")
    web.add(page, html_response(render_page(chrome, title, paragraphs, declare_charset=False).encode("utf-8"),
                                charset=None))
    out.append(page)
    title, paragraphs = _article(web, host, "wrong-charset")
    page = PageTruth(f"http://{host}/sujet/charset-faux", host, 200, "charset", title, "fr",
                     "\n\n".join(paragraphs), encoding="iso-8859-1", declared_charset="utf-8",
                     note="Content-Type says utf-8 but the bytes are ISO-8859-1")
    body = render_page(chrome, title, paragraphs, declare_charset=False).encode("iso-8859-1")
    web.add(page, Response(200, (("Content-Type", "text/html; charset=utf-8"),), body))
    out.append(page)
    return out


def _shop(web, host, items):
    chrome = web.chrome[host]
    title, paragraphs = _article(web, host, "windows-1252")
    # € and curly quotes exist in windows-1252 (0x80, 0x93, 0x94) but not in ISO-8859-1: a real cp1252 test.
    paragraphs.append("Precio especial: “24,99 €” – sólo esta semana, ¡hasta agotar existencias!")
    page = PageTruth(f"http://{host}/producto/oferta-especial.html", host, 200, "charset", title, "es",
                     "\n\n".join(paragraphs), encoding="windows-1252", declared_charset="windows-1252",
                     note="declared and encoded windows-1252, with €, curly quotes and ñ/á/ó")
    web.add(page, html_response(render_page(chrome, title, paragraphs, charset="windows-1252"),
                                charset="windows-1252"))
    empty = PageTruth(f"http://{host}/oferta-vacia.html", host, 200, "empty", None, None, "",
                      note="200 with an empty body")
    web.add(empty, Response(200, (("Content-Type", "text/html; charset=utf-8"),), b""))
    return [page, empty]
