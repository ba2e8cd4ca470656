"""nofollow as the web says it: `<meta name="robots">` (or our user-agent token), the X-Robots-Tag header, and
`rel="nofollow"` on a link.  A page that says nofollow is archived, but its links are not followed; directives for
another crawler are not ours; `obey_nofollow=false` follows everything."""
from __future__ import annotations

import pytest

from crawl_helpers import run_crawl
from spider.nofollow import agent_token, follows_no_links, header_directives, meta_directives

TOKEN = "weblm-spider"


def test_our_token_is_the_user_agents_product_name():
    assert agent_token("weblm-spider/0.1 (+https://example.invalid/weblm-crawler; x@example.invalid)") == TOKEN
    assert agent_token("CCBot") == "ccbot"


@pytest.mark.parametrize("values, nofollow", [
    (["nofollow"], True),
    (["noindex, NoFollow"], True),
    (["none"], True),
    (["weblm-spider: nofollow"], True),
    (["otherbot: nofollow"], False),                                  # another crawler's
    (["unavailable_after: 25 Jun 2030 15:00:00 PST"], False),         # a directive with a colon, not a user agent
    (["noindex", "otherbot: none"], False),
    ([], False),
])
def test_x_robots_tag_values(values, nofollow):
    assert follows_no_links(header_directives(values, TOKEN)) is nofollow


@pytest.mark.parametrize("metas, nofollow", [
    ([("robots", "noindex, nofollow")], True),
    ([("ROBOTS", "None")], True),                                      # read case-blind
    ([("weblm-spider", "none")], True),
    ([("googlebot", "nofollow")], False),
    ([("description", "nofollow fans")], False),
    ([("robots", "index, follow")], False),
])
def test_meta_robots_tags(metas, nofollow):
    assert follows_no_links(meta_directives(metas, TOKEN)) is nofollow


def page(links: tuple[str, ...], head: str = "", rel: dict | None = None) -> bytes:
    anchors = "".join(f"<a href='{href}'{' rel=' + repr(rel[href]) if rel and href in rel else ''}>{href}</a> "
                      for href in links)
    return f"<html><head>{head}</head><body><p>A page.</p>{anchors}</body></html>".encode()


PAGES = {
    "/": (page(("/meta", "/rel", "/header", "/other-bot", "/ours", "/unavailable")), ""),
    "/meta": (page(("/m1",), "<meta name='robots' content='noindex, NOFOLLOW'>"), ""),
    "/rel": (page(("/r1", "/r2"), rel={"/r1": "ugc nofollow"}), ""),
    "/header": (page(("/h1",)), "X-Robots-Tag: nofollow\r\n"),
    "/other-bot": (page(("/o1",), "<meta name='googlebot' content='nofollow'>"), "X-Robots-Tag: otherbot: none\r\n"),
    "/ours": (page(("/u1",), "<meta name='weblm-spider' content='none'>"), ""),
    "/unavailable": (page(("/x1",)), "X-Robots-Tag: unavailable_after: 25 Jun 2030 15:00:00 PST\r\n"),
}


def answer(host: str, path: str):
    if path == "/robots.txt":
        body, extra, kind = b"User-agent: *\nDisallow:\n", "", "text/plain"
    else:
        (body, extra), kind = PAGES.get(path, (page(()), "")), "text/html"
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode(), body


FOLLOWED = {"/robots.txt", "/", "/meta", "/rel", "/r2", "/header", "/other-bot", "/o1", "/ours", "/unavailable", "/x1"}


@pytest.mark.parametrize("obey", [True, False])
def test_a_crawl_follows_no_link_a_page_or_a_link_says_nofollow_for(tmp_path, raw_server, obey):
    server = raw_server(answer, by_host=True)
    run = run_crawl(["http://nf.weblm.test/"], tmp_path, ["proxy=" + server.proxy_url(), f"obey_nofollow={obey}"])
    assert run.returncode == 0, run.log[-3000:]
    fetched = sorted(path for _, _, path in server.arrivals)
    scrapy = run.stats["scrapy"]
    if obey:
        assert fetched == sorted(FOLLOWED)   # /meta, /header and /ours archived, their links not followed; /r1 neither
        assert (scrapy["weblm/nofollow/pages"], scrapy["weblm/nofollow/links"]) == (3, 1)
    else:
        assert fetched == sorted(FOLLOWED | {"/m1", "/r1", "/h1", "/u1"})
        assert not any(key.startswith("weblm/nofollow/") for key in scrapy)
