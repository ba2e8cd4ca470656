"""The Scrapy project's settings module (scrapy.cfg), for `scrapy crawl weblm -a seeds=FILE`.

The same settings `python -m spider.crawl` builds, from conf/crawl.yaml and conf/paths.yaml plus
the overlays in $WEBLM_CONF_OVERLAY; Scrapy's `-s NAME=VALUE` still overrides any of them.
"""
from conf.paths import load_paths
from spider.config import load_crawl_config
from spider.settings import scrapy_settings

_paths = load_paths()
globals().update(scrapy_settings(load_crawl_config(), _paths.warc_dir, stats_file=_paths.crawl_stats,
                                 seeds_file=_paths.seeds, warc_buffer=_paths.warc_buffer, local_dir=_paths.local))
