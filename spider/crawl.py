"""`python -m spider.crawl --seeds FILE [--warc-dir DIR] [--stats FILE] [-o key=value ...]`

(`scrapy crawl weblm -a seeds=FILE` from the project root runs the same crawl: scrapy.cfg.)

Crawls from the seeds into WARC/1.1 files and writes the crawl counters as JSON.  Defaults come
from conf/paths.yaml (paths.seeds, paths.warc_dir, paths.crawl_stats); crawl settings from
conf/crawl.yaml, each overridable with `-o key=value` (e.g. `-o download_delay_s=0.1`).
Each of the three may be a URI (s3://bucket/warc): WARC files are then written in paths.warc_buffer
and uploaded as they close (spider/warc_upload.py).
The first SIGINT/SIGTERM stops gracefully (WARC files closed and renamed), a second one hard.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from urllib.parse import urlsplit

from scrapy.crawler import CrawlerProcess

import storage
from conf import ConfigError, split_paths_overrides
from conf.paths import load_paths
from spider.config import load_crawl_config
from spider.crawl_stats import crawl_stats
from spider.seeds import SeedError, read_seeds
from spider.settings import scrapy_settings
from spider.web_spider import WebSpider

logger = logging.getLogger("spider.crawl")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spider.crawl", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", help="seed file, one URL per line (default: paths.seeds); a worker of a shared "
                                        "frontier (frontier.url) may start without one and join the crawl")
    parser.add_argument("--warc-dir", help="where WARC files go (default: paths.warc_dir)")
    parser.add_argument("--stats", help="crawl counters JSON (default: paths.crawl_stats)")
    parser.add_argument("--fresh-frontier", action="store_true",
                        help="forget the frontier's state first (a new crawl); by default a crawl resumes where the "
                             "frontier stopped: URLs already fetched come back only when their recrawl is due")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a conf/crawl.yaml setting, e.g. -o proxy=http://127.0.0.1:8080; "
                             "paths.KEY=VALUE overrides conf/paths.yaml")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        crawl_overrides, path_overrides = split_paths_overrides(args.override)
        paths = load_paths(path_overrides)
        cfg = load_crawl_config(crawl_overrides)
        if args.seeds or storage.exists(paths.seeds) or not cfg.frontier.url:
            seeds = read_seeds(_location(args.seeds) if args.seeds else paths.seeds)
        else:  # a worker joining a shared crawl: the frontier has the work and the crawl's scope
            seeds = []
            print(f"spider.crawl: no seeds ({paths.seeds} does not exist): joining the crawl in "
                  f"{cfg.frontier.url}", file=sys.stderr)
    except (ConfigError, SeedError, ValueError) as exc:
        print(f"spider.crawl: {exc}", file=sys.stderr)
        return 2
    if cfg.frontier.url.startswith(("redis://", "rediss://", "redis+cluster://")):
        from spider.frontier.redis_backend import unreachable
        why = unreachable(cfg.frontier.url)
        if why:  # exit 1, not 2: a service manager's Restart=on-failure tries again until Redis is back
            where = urlsplit(cfg.frontier.url)   # host and port only: the URL may carry a password
            print(f"spider.crawl: the frontier's Redis at {where.hostname}:{where.port or 6379} does not answer "
                  f"({why}); start Redis or correct frontier.url", file=sys.stderr)
            return 1
    warc_dir = _location(args.warc_dir) if args.warc_dir else paths.warc_dir
    stats_path = _location(args.stats) if args.stats else paths.crawl_stats

    if args.fresh_frontier:
        from spider.frontier import open_backend
        backend = open_backend(cfg, paths.local)
        backend.clear()
        backend.close()
        print(f"spider.crawl: frontier {cfg.frontier.url or 'embedded (paths.local)'} cleared", file=sys.stderr)
    process = CrawlerProcess(scrapy_settings(cfg, warc_dir, stats_file=stats_path, warc_buffer=paths.warc_buffer,
                                             local_dir=paths.local))
    crawler = process.create_crawler(WebSpider)
    process.crawl(crawler, seeds=seeds, config=cfg)
    process.start()  # returns after the spider closes: normally, by a limit, or on a signal

    if crawler.stats.get_value("start_time") is None:  # CoreStats sets it when the spider opens
        print("spider.crawl: the crawl did not start; the error is in the log above", file=sys.stderr)
        return 1
    result = crawl_stats(crawler.stats.get_stats(), seeds=len(seeds))  # CrawlStatsExport wrote it to stats_path
    elapsed = result["elapsed_s"] or 0.0
    print(f"crawl finished ({result['finish_reason']}): {result['pages_fetched']} pages from "
          f"{len(result['hosts'])} hosts in {elapsed:.1f} s ({result['pages_fetched'] / max(elapsed, 1e-9):.1f} "
          f"pages/s), {result['requests']} requests, {sum(result['errors'].values())} errors "
          f"{result['errors']}, {result['robots_denied']} denied by robots.txt; "
          f"{result['warc_files']} WARC file(s), {result['warc_bytes']} bytes in {warc_dir}; stats: {stats_path}")
    upload = result["warc_upload"]
    if upload:
        print(f"uploads to {warc_dir}: {upload.get('files_uploaded', 0)} file(s), {upload.get('bytes_uploaded', 0)} "
              f"bytes ({upload.get('files_recovered', 0)} left by an earlier crawl), "
              f"{upload.get('attempts_failed', 0)} failed attempt(s)")
        if upload.get("files_in_buffer"):
            print(f"WARNING: {upload['files_in_buffer']} WARC file(s) ({upload['bytes_in_buffer']} bytes) are not in "
                  f"{warc_dir} yet but in the local buffer {upload['buffer']}: {', '.join(upload['files_left'])}. "
                  f"The next crawl started with this buffer uploads them (or copy them there yourself); "
                  f"do not delete the folder.", file=sys.stderr)
    if result["finish_reason"] == "warc_write_error":
        print("spider.crawl: stopped because WARC records could not be written (see the CRITICAL line above); "
              "the files written are whole", file=sys.stderr)
        return 1
    return 0


def _location(arg: str) -> str:
    """A command-line path: a URI as given, a local path made absolute (relative to where the user runs it)."""
    return arg if storage.is_uri(arg) else os.path.abspath(arg)


if __name__ == "__main__":
    sys.exit(main())
