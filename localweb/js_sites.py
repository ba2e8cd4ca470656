"""Hosts whose text appears only after JavaScript runs (issue 10), so a crawl exercises both render paths.

  app.<domain>      client-side rendering: an empty `#app` shell fetches its article from a JSON endpoint
                    (and a tracking endpoint that robots.txt disallows: a polite render never asks for it)
  spa.<domain>      a hydrated single-page app: `#__next` empty, the article inside `__NEXT_DATA__`
  feed.<domain>     a page whose paragraphs load as the reader scrolls (IntersectionObserver + JSON)
  trouble.<domain>  bad input for the renderer: a page that never finishes loading, an endless scroll,
                    popups and a download, a script that allocates memory without end
Every host also has a server-rendered /about.html carrying a script: a page that must NOT be rendered.
Ground truth: kind `js-csr`, `js-spa`, `js-scroll` (needs rendering, `text` is what rendering shows),
`js-hostile` (a render must fail, counted, and keep the plain HTML), `about` (plain, has scripts).
"""
from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

from localweb.pages import Chrome, Link, render_listing, render_page
from localweb.responses import Response, html_response, text_response
from localweb.text import TextGenerator
from localweb.truth import HostTruth, PageTruth

if TYPE_CHECKING:
    from localweb.sites import GeneratedWeb

JS_ROLES = ("app", "spa", "feed", "trouble")
NEEDS_RENDER_KINDS = ("js-csr", "js-spa", "js-scroll")
HANG_SECONDS = 120.0  # the never-loading page's script: far beyond any render timeout
DEFERRED_MS = 1200    # one app page's loader waits this long: past a render's first quiet look, within timer_wait_s
_ANALYTICS = "<script>window.dataLayer = window.dataLayer || []; window.dataLayer.push({page: location.pathname});</script>"
_BUILD = """function build(root, d) {
  const h = document.createElement('h1'); h.textContent = d.title; root.appendChild(h);
  const art = document.createElement('article'); root.appendChild(art);
  for (const p of d.paragraphs) { const e = document.createElement('p'); e.textContent = p; art.appendChild(e); }
  const ul = document.createElement('ul'); root.appendChild(ul);
  for (const l of d.links || []) { const li = document.createElement('li'); const a = document.createElement('a');
    a.href = l.href; a.textContent = l.text; li.appendChild(a); ul.appendChild(li); }
}"""


def _shell(title: str, body: str, language: str = "en") -> str:
    return (f'<!DOCTYPE html>\n<html lang="{language}">\n<head>\n<meta charset="utf-8">\n'
            f'<title>{html.escape(title)}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n')


def _json(data) -> Response:
    return Response(200, (("Content-Type", "application/json"),), json.dumps(data, ensure_ascii=False).encode())


def _js(source: str, delay: float = 0.0) -> Response:
    return Response(200, (("Content-Type", "text/javascript"),), source.encode(), delay_seconds=delay)


def add_js_sites(web: "GeneratedWeb") -> list[str]:
    """Build the JS hosts into `web` (routes and truth); returns their hostnames."""
    from localweb.sites import HostPlan  # sites.py imports this module: a late import breaks the cycle

    hosts = [web.host(role) for role in JS_ROLES]
    for host in hosts:
        web.plans[host] = HostPlan(host.split(".")[0], "en", host, "/{slug}", None)
        web.truth.hosts[host] = HostTruth(host, "en", host.split(".")[0], 200,
                                          ["/private-api/"] if host.startswith("app.") else [])
        robots = "User-agent: *\nDisallow: /private-api/\n" if host.startswith("app.") else "User-agent: *\nDisallow:\n"
        web.routes[(host, "/robots.txt")] = text_response(robots)
        _about(web, host)
    app, spa, feed, trouble = hosts
    n = max(2, min(web.cfg.pages_per_host // 5, 8))
    _app(web, app, n)
    _spa(web, spa, n)
    _feed(web, feed)
    _trouble(web, trouble)
    return hosts


def _article(web: "GeneratedWeb", host: str, i: int) -> tuple[str, list[str]]:
    gen = TextGenerator("en", web.rng(host, "js-article", i))
    return gen.title(), gen.paragraphs(web.cfg)


def _about(web: "GeneratedWeb", host: str) -> None:
    gen = TextGenerator("en", web.rng(host, "about"))
    paragraphs = [gen.paragraph(3, 5), gen.paragraph(3, 5)]
    chrome = Chrome(host.split(".")[0].capitalize() + " (JS host)", "en", (Link(f"http://{host}/", "Home"),), ())
    page = render_page(chrome, "About", paragraphs, extra_html=_ANALYTICS + "\n")
    web.add(PageTruth(f"http://{host}/about.html", host, 200, "about", "About", "en", "\n\n".join(paragraphs),
                      note="server-rendered text with a script: rendering adds nothing"), html_response(page))


def _home(web: "GeneratedWeb", host: str, name: str, links: list[Link]) -> None:
    chrome = Chrome(name, "en", (Link(f"http://{host}/", "Home"), Link(f"http://{host}/about.html", "About")), ())
    web.add(PageTruth(f"http://{host}/", host, 200, "index", name, "en"),
            html_response(render_listing(chrome, name, [(l, "") for l in links])))


def _app(web: "GeneratedWeb", host: str, n: int) -> None:
    """Client-side rendering: the shell fetches /api/items/<i>.json and builds the article from it.  The last item
    defers its fetch by DEFERRED_MS, as pages that load once idle or after a consent check do."""
    links = []
    for i in range(n):
        title, paragraphs = _article(web, host, i)
        url = f"http://{host}/items/{i}"
        nxt = Link(f"http://{host}/items/{(i + 1) % n}", "Next item")
        web.routes[(host, f"/api/items/{i}.json")] = _json(
            {"title": title, "paragraphs": paragraphs, "links": [{"href": nxt.href, "text": nxt.text}]})
        load = f"fetch('/api/items/{i}.json').then(r => r.json()).then(d => build(document.getElementById('app'), d))"
        if i == n - 1:
            load = f"setTimeout(() => {load}, {DEFERRED_MS})"
        body = ('<div id="app"></div>\n<noscript>You need to enable JavaScript to run this app.</noscript>\n'
                f"<script>{_BUILD}\nfetch('/private-api/track.json').catch(() => null);\n{load};</script>")
        note = "client-side rendering from a JSON endpoint" + (f", fetched {DEFERRED_MS} ms after load" * (i == n - 1))
        web.add(PageTruth(url, host, 200, "js-csr", title, "en", "\n\n".join(paragraphs), note=note),
                html_response(_shell(title, body)))
        links.append(Link(url, title))
    web.routes[(host, "/private-api/track.json")] = _json({"tracked": True})
    _home(web, host, "Weblm App", links)


def _spa(web: "GeneratedWeb", host: str, n: int) -> None:
    """A hydrated SPA: empty #__next, the page's props in __NEXT_DATA__, a bundle that builds the DOM."""
    web.routes[(host, "/_next/static/app.js")] = _js(
        _BUILD + "\nconst d = JSON.parse(document.getElementById('__NEXT_DATA__').textContent).props.pageProps;\n"
                 "build(document.getElementById('__next'), d);\n")
    links = []
    for i in range(n):
        title, paragraphs = _article(web, host, i)
        url = f"http://{host}/post/{i}"
        data = {"props": {"pageProps": {"title": title, "paragraphs": paragraphs,
                                        "links": [{"href": f"http://{host}/post/{(i + 1) % n}", "text": "Next post"}]}},
                "page": "/post/[id]", "buildId": "weblm"}
        body = ('<img src="/_next/static/hero.png" alt="">\n<div id="__next"></div>\n'
                f'<script id="__NEXT_DATA__" type="application/json">{html.escape(json.dumps(data), quote=False)}</script>\n'
                '<script src="/_next/static/app.js" defer></script>')
        web.add(PageTruth(url, host, 200, "js-spa", title, "en", "\n\n".join(paragraphs),
                          note="hydrated single-page app (__NEXT_DATA__)"), html_response(_shell(title, body)))
        links.append(Link(url, title))
    _home(web, host, "Weblm SPA", links)


def _feed(web: "GeneratedWeb", host: str) -> None:
    """Paragraphs load only when the reader scrolls to the sentinel: three chunks, then the end.  The loader waits
    150 ms before it fetches, as feeds that debounce their scroll handlers do: a render must not take the quiet
    right after a scroll for the end of the feed."""
    title, paragraphs = _article(web, host, 0)
    chunks = [paragraphs[i::3] for i in range(3)]
    ordered = [p for chunk in chunks for p in chunk]
    for k, chunk in enumerate(chunks):
        web.routes[(host, f"/api/feed/{k}.json")] = _json({"paragraphs": chunk, "more": k + 1 < len(chunks)})
    body = (f'<h1>{html.escape(title)}</h1>\n<div id="feed"></div>\n<div style="height:3000px"></div>\n'
            '<div id="sentinel">Loading…</div>\n<script>\nlet k = 0, busy = false;\n'
            "const io = new IntersectionObserver(es => { if (!es[0].isIntersecting || busy || k < 0) return; busy = true;\n"
            "  setTimeout(() => fetch('/api/feed/' + k + '.json').then(r => r.json()).then(d => {\n"
            "    for (const p of d.paragraphs) { const e = document.createElement('p'); e.textContent = p;\n"
            "      document.getElementById('feed').appendChild(e); }\n"
            "    k = d.more ? k + 1 : -1; busy = false;\n"
            "    const s = document.getElementById('sentinel'); io.unobserve(s); io.observe(s); }), 150); });\n"
            "io.observe(document.getElementById('sentinel'));\n</script>")
    url = f"http://{host}/stream"
    web.add(PageTruth(url, host, 200, "js-scroll", title, "en", "\n\n".join(ordered),
                      note="paragraphs load on scroll"), html_response(_shell(title, body)))
    _home(web, host, "Weblm Feed", [Link(url, title)])


TROUBLE_PAGES = {
    "/hang": ("never finishes loading: its script answers after minutes",
              '<div id="root"></div>\n<script src="/hang.js"></script>'),
    "/endless": ("an endless scroll: the DOM grows without end",
                 '<div id="root"></div>\n<script>\nconst r = document.getElementById("root");\n'
                 'setInterval(() => { for (let i = 0; i < 50; i++) { const p = document.createElement("p");\n'
                 '  p.textContent = "endless ".repeat(200); r.appendChild(p); } }, 10);\n</script>'),
    "/popup": ("opens popups and starts a download",
               '<div id="root"></div>\n<a id="dl" href="/files/report.bin" download>report</a>\n<script>\n'
               'window.open("/about.html"); window.open("/about.html");\ndocument.getElementById("dl").click();\n'
               'document.getElementById("root").textContent = "Popup page text ".repeat(30);\n</script>'),
    "/memory": ("a script that allocates memory without end",
                '<div id="root"></div>\n<script>\nconst hoard = [];\n'
                'setInterval(() => { for (let i = 0; i < 20; i++) hoard.push(new Array(1 << 20).fill(i)); }, 5);\n'
                '</script>'),
}


def _trouble(web: "GeneratedWeb", host: str) -> None:
    web.routes[(host, "/hang.js")] = _js("document.getElementById('root').textContent = 'late';", delay=HANG_SECONDS)
    web.routes[(host, "/files/report.bin")] = Response(
        200, (("Content-Type", "application/octet-stream"), ("Content-Disposition", 'attachment; filename="r.bin"')),
        b"\0" * 4096)
    links = []
    for path, (note, body) in TROUBLE_PAGES.items():
        url = f"http://{host}{path}"
        web.add(PageTruth(url, host, 200, "js-hostile", path[1:], "en", None, note=note),
                html_response(_shell(path[1:], body)))
        links.append(Link(url, path[1:]))
    _home(web, host, "Weblm Trouble", links)
