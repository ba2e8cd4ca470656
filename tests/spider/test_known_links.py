"""With the frontier, a link to a URL its backend already has is dropped by the spider, before it becomes a Request
that Scrapy's middlewares, engine and signals would carry to the scheduler only to be refused there."""
from collections import Counter
from types import SimpleNamespace

from scrapy.http import HtmlResponse, Request

from spider.config import load_crawl_config
from spider.web_spider import WebSpider

PAGE = b"""<html><body><a href="http://a.weblm.test/menu">menu</a> <a href="http://a.weblm.test/new#part">new</a>
<a href="http://a.weblm.test/footer">footer</a></body></html>"""


def test_known_links_are_dropped_by_the_spider_and_counted_as_seen():
    config = load_crawl_config()
    stats = Counter()
    spider = WebSpider(seeds=["http://a.weblm.test/"], config=config)
    spider.crawler = SimpleNamespace(stats=SimpleNamespace(inc_value=lambda key, n=1: stats.update({key: n})),
                                     weblm_known_urls={"http://a.weblm.test/menu", "http://a.weblm.test/footer"})
    response = HtmlResponse("http://a.weblm.test/", body=PAGE, encoding="utf-8",
                            request=Request("http://a.weblm.test/"))
    assert [r.url for r in spider.parse(response)] == ["http://a.weblm.test/new"]
    assert stats["weblm/filtered/seen"] == 2
    spider.crawler.weblm_known_urls.clear()  # the scheduler starts its shortcut over: every link goes to it again
    assert len(list(spider.parse(response))) == 3
