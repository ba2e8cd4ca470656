"""The crawl: Scrapy from a seed file to WARC/1.1 files (SEAMS §1 and §2).

`python -m spider.crawl --seeds FILE` runs it.  Configuration: `conf/crawl.yaml`.
"""
