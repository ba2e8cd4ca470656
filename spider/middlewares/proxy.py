"""Send every request through `crawl.proxy` (SEAMS §1), robots.txt requests included.

Scrapy's HttpProxyMiddleware (750) does the proxying once `meta["proxy"]` is set; this
middleware runs before it (740) so that no request, not even the ones RobotsTxtMiddleware
issues itself, reaches a host directly.  Download slots stay keyed on the URL's hostname.
"""
from __future__ import annotations

from scrapy.exceptions import NotConfigured


class ProxyMiddleware:
    def __init__(self, proxy: str):
        self.proxy = proxy

    @classmethod
    def from_crawler(cls, crawler):
        proxy = crawler.settings["WEBLM_CRAWL_CONFIG"].proxy
        if not proxy:
            raise NotConfigured("crawl.proxy is empty: requests go direct")
        return cls(proxy)

    def process_request(self, request):
        request.meta.setdefault("proxy", self.proxy)
        return None
