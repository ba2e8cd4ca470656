"""The crawl frontier: a Scrapy scheduler over a shared backend (Redis for a cluster, SQLite on one machine)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spider.config import CrawlConfig
    from spider.frontier.backend import FrontierBackend


def open_backend(cfg: "CrawlConfig", local_dir: str) -> "FrontierBackend":
    """The backend `frontier.url` names: Redis (redis://, redis+cluster://) or embedded SQLite (default)."""
    from spider.frontier.bloom import BloomLayout

    f = cfg.frontier
    bloom = BloomLayout(max(1, f.bloom_capacity // f.partitions), f.bloom_fp_rate)
    if f.url.startswith(("redis://", "rediss://", "redis+cluster://")):
        from spider.frontier.redis_backend import RedisFrontier
        return RedisFrontier(f.url, f.namespace, f.partitions, bloom)
    from spider.frontier.embedded import SqliteFrontier
    return SqliteFrontier(frontier_file(cfg, local_dir), BloomLayout(f.bloom_capacity, f.bloom_fp_rate))


def frontier_file(cfg: "CrawlConfig", local_dir: str) -> str:
    """The embedded frontier's SQLite file: `frontier.url`'s sqlite:///PATH, else frontier/frontier.db under
    `local_dir` (paths.local)."""
    f = cfg.frontier
    if f.url.startswith("sqlite:///"):
        return f.url[len("sqlite:///") - 1:]
    return str(Path(local_dir) / "frontier" / "frontier.db")
