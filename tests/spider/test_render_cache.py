"""The render pool's cache of scripts and stylesheets: bounded by bytes and by age."""
from __future__ import annotations

from spider.render.cache import SubresourceCache

JS = {"content-type": "text/javascript"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_least_recently_used_answers_go_first_once_the_bytes_are_spent():
    cache = SubresourceCache(max_bytes=100, max_age_s=60)
    for name in "abcd":
        assert cache.put(f"http://h.test/{name}.js", 200, JS, name.encode() * 25)
    assert len(cache) == 4 and cache.bytes == 100
    assert cache.get("http://h.test/a.js").body == b"a" * 25   # a is used again: b is now the oldest
    assert cache.put("http://h.test/e.js", 200, JS, b"e" * 25)
    assert cache.get("http://h.test/b.js") is None
    assert [cache.get(f"http://h.test/{n}.js") is not None for n in "acde"] == [True] * 4
    assert cache.bytes == 100


def test_an_answer_over_a_quarter_of_the_cache_is_not_kept_and_a_new_one_replaces_the_old():
    cache = SubresourceCache(max_bytes=100, max_age_s=60)
    assert not cache.put("http://h.test/big.js", 200, JS, b"x" * 26)
    assert cache.get("http://h.test/big.js") is None and cache.bytes == 0
    cache.put("http://h.test/a.js", 200, JS, b"1" * 10)
    cache.put("http://h.test/a.js", 200, {"content-type": "text/css"}, b"2" * 20)
    answer = cache.get("http://h.test/a.js")
    assert answer.body == b"2" * 20 and answer.headers == {"content-type": "text/css"} and cache.bytes == 20


def test_an_answer_older_than_max_age_is_fetched_again():
    clock = Clock()
    cache = SubresourceCache(max_bytes=1000, max_age_s=60, clock=clock)
    cache.put("http://h.test/app.js", 200, JS, b"v1")
    clock.now += 59
    assert cache.get("http://h.test/app.js").body == b"v1"
    clock.now += 2
    assert cache.get("http://h.test/app.js") is None   # a site may deploy a new bundle under the same URL
    assert len(cache) == 0 and cache.bytes == 0
