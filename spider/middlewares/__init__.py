"""Downloader middlewares of the crawl: where each sits in Scrapy's chain is set in spider/settings.py."""
