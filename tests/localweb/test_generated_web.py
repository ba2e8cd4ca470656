"""The generated web as a crawler sees it through the proxy."""
from __future__ import annotations

import gzip
import re
import socket
import time
from html import unescape

import pytest

from localweb import load_config
from localweb.sites import GeneratedWeb

from localweb_client import SMALL, fetch


def first(web, kind: str, host_role: str | None = None):
    return next(p for p in web.truth.pages.values()
                if p.kind == kind and (host_role is None or p.host.startswith(host_role + ".")))


def test_every_generated_host_serves_its_home_page_as_a_seed(web):
    assert len(web.hosts) == 8   # 5 content hosts, mirror, events, status
    for host in web.hosts:
        assert f"http://{host}/" in web.seeds
        status, headers, body = fetch(web, f"http://{host}/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b"<nav" in body and b"<footer" in body


def test_robots_txt_per_host_with_disallows_crawl_delay_and_a_500(web, cfg):
    status, _, body = fetch(web, "http://news.weblm.test/robots.txt")
    assert status == 200 and b"Disallow: /private/" in body
    status, _, body = fetch(web, "http://blog.weblm.test/robots.txt")
    assert f"Crawl-delay: {cfg.crawl_delay_seconds}".encode() in body
    status, _, body = fetch(web, "http://shop.weblm.test/robots.txt")
    assert b"Disallow: /cart/" in body
    assert b"Disallow: /admin/" in fetch(web, "http://forum.weblm.test/robots.txt")[2]
    assert fetch(web, "http://status.weblm.test/robots.txt")[0] == 500
    assert web.truth.hosts["status.weblm.test"].robots_status == 500
    assert web.truth["http://status.weblm.test/incident/latest"].robots_allowed is None
    assert fetch(web, "http://mirror.weblm.test/robots.txt")[0] == 404
    # Disallowed paths are really linked to, so a crawler that ignores robots.txt would fetch them.
    _, _, home = fetch(web, "http://news.weblm.test/")
    assert b'href="http://news.weblm.test/private/staff.html"' in home
    assert web.truth["http://news.weblm.test/private/staff.html"].robots_allowed is False
    product = first(web, "article", "shop")
    _, _, page = fetch(web, product.url)
    assert b"http://shop.weblm.test/cart/add?item=" in page


def test_article_has_boilerplate_around_the_true_main_text(web):
    article = next(p for p in web.truth.pages.values() if p.kind == "article" and p.content_encoding is None)
    status, headers, body = fetch(web, article.url)
    html = body.decode("utf-8")
    assert status == 200
    for part in ('class="cookie-banner"', "<header", "<nav", "<footer", 'class="sidebar"'):
        assert part in html
    inside = re.search(r"<article>(.*)</article>", html, re.S).group(1)
    assert unescape(re.search(r"<h1>(.*?)</h1>", inside).group(1)) == article.title
    paragraphs = [unescape(p) for p in re.findall(r"<p>(.*?)</p>", inside)]
    assert "\n\n".join(paragraphs) == article.text
    assert 150 < len(article.text.split()) < 1200
    assert f'lang="{article.language}"' in html


def test_languages_per_host(web):
    langs = {p.host: p.language for p in web.truth.pages.values() if p.kind == "article"}
    assert langs["wiki.weblm.test"] == "de" and langs["forum.weblm.test"] == "fr"
    assert langs["shop.weblm.test"] == "es" and langs["news.weblm.test"] == "en"


def test_same_seed_gives_the_same_bytes_and_another_seed_does_not(cfg):
    a, b = GeneratedWeb(cfg), GeneratedWeb(load_config(SMALL))
    assert a.routes.keys() == b.routes.keys()
    assert all(a.routes[k].body == b.routes[k].body for k in a.routes)
    c = GeneratedWeb(load_config(SMALL + [f"seed={cfg.seed + 1}"]))
    assert a.respond("news.weblm.test", "/").body != c.respond("news.weblm.test", "/").body


def test_calendar_trap_links_to_the_next_month_forever(web):
    url = next(p.url for p in web.truth.pages.values() if p.kind == "calendar")
    seen = set()
    for _ in range(30):
        status, _, body = fetch(web, url)
        assert status == 200
        seen.add(url)
        url = re.search(rb'href="([^"]+)">next month', body).group(1).decode()
    assert len(seen) == 30 and url not in seen
    assert web.truth.hosts["events.weblm.test"].trap_prefix == "/calendar/"


def test_error_statuses_as_designed(web):
    missing = first(web, "missing")
    assert fetch(web, missing.url)[0] == 404
    assert fetch(web, first(web, "server-error").url)[0] == 500
    redirect = next(p for p in web.truth.pages.values() if p.status == 301)
    status, headers, _ = fetch(web, redirect.url)
    assert status == 301 and headers["location"] == redirect.redirect_to
    empty = first(web, "empty")
    status, headers, body = fetch(web, empty.url)
    assert status == 200 and body == b"" and headers["content-length"] == "0"
    # Linked from their home pages, so a crawl can find them.
    _, _, home = fetch(web, "http://news.weblm.test/")
    assert missing.url.encode() in home


def test_rate_limited_page_says_429_with_retry_after_then_200(web, cfg):
    url = first(web, "rate-limited").url
    for _ in range(cfg.rate_limited_responses):
        status, headers, _ = fetch(web, url)
        assert status == 429 and headers["retry-after"] == str(cfg.retry_after_seconds)
    assert fetch(web, url)[0] == 200


def test_slow_page_times_out_a_short_timeout_client(web, cfg):
    url = first(web, "slow").url
    start = time.monotonic()
    with pytest.raises((socket.timeout, TimeoutError)):
        fetch(web, url, timeout=0.5)
    assert time.monotonic() - start < cfg.slow_page_seconds


def test_windows_1252_page_is_really_encoded_so(web):
    page = first(web, "charset", "shop")
    status, headers, body = fetch(web, page.url)
    assert headers["content-type"] == "text/html; charset=windows-1252"
    assert b"\x80" in body and b"\x93" in body          # € and “ in windows-1252
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    assert page.text.splitlines()[-1] in unescape(body.decode("windows-1252"))


def test_wrong_and_missing_charset_pages(web):
    wrong = web.truth["http://forum.weblm.test/sujet/charset-faux"]
    _, headers, body = fetch(web, wrong.url)
    assert "charset=utf-8" in headers["content-type"] and wrong.encoding == "iso-8859-1"
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    _, headers, body = fetch(web, "http://forum.weblm.test/sujet/charset-manquant")
    assert headers["content-type"] == "text/html" and b"charset" not in body.lower()


def test_gzip_pages_decompress_to_the_article(web):
    page = next(p for p in web.truth.pages.values() if p.content_encoding == "gzip" and p.kind == "article")
    status, headers, body = fetch(web, page.url)
    assert headers["content-encoding"] == "gzip" and int(headers["content-length"]) == len(body)
    html = gzip.decompress(body).decode("utf-8")
    assert f"<h1>{page.title}</h1>" in unescape(html)


def test_large_page_is_at_least_the_configured_size(web, cfg):
    _, _, body = fetch(web, first(web, "large").url)
    assert len(body) >= cfg.large_page_bytes


def test_mirror_has_exact_and_near_duplicates(web, cfg):
    exact, near = web.truth.by_kind("mirror-exact"), web.truth.by_kind("mirror-near")
    assert len(exact) == 2 and len(near) == 2
    for copy in exact:
        assert fetch(web, copy.url)[2] == fetch(web, copy.duplicate_of)[2]
    for copy in near:
        original = web.truth[copy.duplicate_of]
        a, b = copy.text.split(), original.text.split()
        differing = sum(x != y for x, y in zip(a, b))
        assert len(a) == len(b) and 0 < differing <= cfg.near_dup_changed_words
        assert copy.changed_words == differing


def test_truth_covers_every_generated_route(web):
    for url, page in web.truth.pages.items():
        host, target = url[len("http://"):].split("/", 1)
        assert web.respond(host, "/" + target).status in (page.status, 429), url
