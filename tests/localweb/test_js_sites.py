"""The local web's JavaScript hosts (localweb/js_sites.py): their text is absent from the plain HTML."""
from __future__ import annotations

import json

import lxml.html
import pytest

from localweb import LocalWeb, load_config
from localweb.js_sites import JS_ROLES, NEEDS_RENDER_KINDS
from localweb_client import SMALL, fetch
from spider.config import load_crawl_config
from spider.render.rule import needs_render, visible_text


RULE = load_crawl_config().render


@pytest.fixture(scope="module")
def js_web():
    with LocalWeb(load_config(SMALL + ["js_hosts=true"])) as running:
        yield running


def test_js_hosts_are_off_by_default_and_added_on_request(js_web):
    assert not any(h.startswith(JS_ROLES) for h in LocalWeb(load_config(SMALL)).hosts)
    assert [h.split(".")[0] for h in js_web.hosts[-4:]] == list(JS_ROLES)
    for kind in (*NEEDS_RENDER_KINDS, "js-hostile"):
        assert js_web.truth.by_kind(kind), kind


@pytest.mark.parametrize("kind", NEEDS_RENDER_KINDS)
def test_the_text_of_a_js_page_is_not_in_its_plain_html_but_behind_its_json(js_web, kind):
    for page in js_web.truth.by_kind(kind):
        status, headers, body = fetch(js_web, page.url)
        assert status == 200 and headers["content-type"].startswith("text/html")
        shown = visible_text(lxml.html.document_fromstring(body))
        assert page.text and page.text.split("\n\n")[0][:50] not in shown
        assert needs_render(body, RULE).render


def test_the_csr_api_serves_the_article_and_robots_txt_hides_the_tracker(js_web):
    page = js_web.truth.by_kind("js-csr")[0]
    n = page.url.rsplit("/", 1)[1]
    status, _, body = fetch(js_web, f"http://app.weblm.test/api/items/{n}.json")
    assert status == 200 and json.loads(body)["paragraphs"] == page.text.split("\n\n")
    status, _, robots = fetch(js_web, "http://app.weblm.test/robots.txt")
    assert status == 200 and b"Disallow: /private-api/" in robots


def test_each_js_host_has_a_plain_page_with_a_script_that_needs_no_render(js_web):
    for host in js_web.hosts[-4:]:
        about = js_web.truth[f"http://{host}/about.html"]
        _, _, body = fetch(js_web, about.url)
        assert b"<script>" in body and about.text.split("\n\n")[0][:50] in body.decode()
        assert needs_render(body, RULE).reason == "enough_text"
