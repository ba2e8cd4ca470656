"""HTML for generated pages: real-looking boilerplate (cookie banner, header, nav, sidebar, footer)
around one `<article>` with an `<h1>` and `<p>` paragraphs, the part extractors should keep."""
from __future__ import annotations

from dataclasses import dataclass
from html import escape

# Boilerplate words per language: what an extractor must learn to throw away.
CHROME = {
    "en": {"home": "Home", "more": "More", "related": "Related", "elsewhere": "Elsewhere on the web",
           "cookie": "We use cookies to improve your experience. By continuing you accept our cookie policy.",
           "accept": "Accept all", "about": "About us", "rights": "All rights reserved.", "older": "Older posts",
           "newer": "Newer posts", "by": "By"},
    "de": {"home": "Startseite", "more": "Mehr", "related": "Verwandte Artikel", "elsewhere": "Anderswo im Netz",
           "cookie": "Wir verwenden Cookies, um Ihr Erlebnis zu verbessern. Mit der Nutzung stimmen Sie zu.",
           "accept": "Alle akzeptieren", "about": "Impressum", "rights": "Alle Rechte vorbehalten.",
           "older": "Ältere Seiten", "newer": "Neuere Seiten", "by": "Von"},
    "fr": {"home": "Accueil", "more": "Plus", "related": "Sujets liés", "elsewhere": "Ailleurs sur le web",
           "cookie": "Nous utilisons des cookies pour améliorer votre expérience. En continuant, vous les acceptez.",
           "accept": "Tout accepter", "about": "À propos", "rights": "Tous droits réservés.",
           "older": "Pages précédentes", "newer": "Pages suivantes", "by": "Par"},
    "es": {"home": "Inicio", "more": "Más", "related": "Productos relacionados", "elsewhere": "En otros sitios",
           "cookie": "Usamos cookies para mejorar su experiencia. Si continúa, acepta nuestra política de cookies.",
           "accept": "Aceptar todo", "about": "Quiénes somos", "rights": "Todos los derechos reservados.",
           "older": "Páginas anteriores", "newer": "Páginas siguientes", "by": "Por"},
}


@dataclass(frozen=True)
class Link:
    href: str
    text: str


@dataclass(frozen=True)
class Chrome:
    """The parts of a site's pages that are the same on every page of that site."""
    site_name: str
    language: str
    nav: tuple[Link, ...]
    footer: tuple[Link, ...]


def _links(links: tuple[Link, ...] | list[Link]) -> str:
    return "".join(f'<li><a href="{escape(l.href)}">{escape(l.text)}</a></li>' for l in links)


def render_page(chrome: Chrome, title: str, paragraphs: list[str], *, byline: str = "",
                related: list[Link] = (), elsewhere: list[Link] = (), extra_html: str = "",
                charset: str = "utf-8", declare_charset: bool = True, language: str | None = None) -> str:
    words = CHROME[chrome.language]
    meta = f'<meta charset="{charset}">\n' if declare_charset else ""
    body = "\n".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    aside = ""
    if related or elsewhere:
        aside = (f'<aside class="sidebar">\n<h2>{words["related"]}</h2>\n<ul>{_links(related)}</ul>\n'
                 f'<h2>{words["elsewhere"]}</h2>\n<ul>{_links(elsewhere)}</ul>\n</aside>\n')
    byline_html = f'<div class="meta"><span class="byline">{escape(byline)}</span></div>\n' if byline else ""
    return (
        f'<!DOCTYPE html>\n<html lang="{language or chrome.language}">\n<head>\n{meta}'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)} | {escape(chrome.site_name)}</title>\n</head>\n<body>\n"
        f'<div class="cookie-banner" id="cookie-consent"><p>{words["cookie"]}</p>'
        f'<button type="button">{words["accept"]}</button></div>\n'
        f'<header class="site-header"><a class="logo" href="/">{escape(chrome.site_name)}</a></header>\n'
        f'<nav class="menu"><ul>{_links(chrome.nav)}</ul></nav>\n'
        f'<main>\n{byline_html}<article>\n<h1>{escape(title)}</h1>\n{body}\n{extra_html}</article>\n{aside}</main>\n'
        f'<footer class="site-footer"><ul>{_links(chrome.footer)}</ul>'
        f'<p>© 2024 {escape(chrome.site_name)}. {words["rights"]}</p></footer>\n'
        f"</body>\n</html>\n"
    )


def render_listing(chrome: Chrome, title: str, entries: list[tuple[Link, str]], *,
                   pager: list[Link] = (), extra_links: list[Link] = ()) -> str:
    """An index page: each entry a link and its teaser, then pagination and any extra links."""
    items = "\n".join(f'<li><a href="{escape(l.href)}">{escape(l.text)}</a> <span class="teaser">{escape(t)}</span></li>'
                      for l, t in entries)
    extra = f'<ul class="more">{_links(extra_links)}</ul>\n' if extra_links else ""
    pager_html = f'<div class="pager"><ul>{_links(pager)}</ul></div>\n' if pager else ""
    return render_page(chrome, title, [], extra_html=f'<ul class="index">\n{items}\n</ul>\n{pager_html}{extra}')
