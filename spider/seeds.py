"""Seed files: one URL per line; blank lines and `#` comments are skipped."""
from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)


class SeedError(ValueError):
    """A seed file that yields no crawlable URL."""


def read_seeds(path: str | Path) -> list[str]:
    """Valid http(s) URLs of the file, in order; each bad line is logged with its number and skipped."""
    path = Path(path)
    if not path.is_file():
        raise SeedError(f"seed file {path} does not exist; pass --seeds FILE (scrapy crawl: -a seeds=FILE) or set paths.seeds")
    seeds, bad = [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        url = line.strip()
        if not url or url.startswith("#"):  # a '#' later in the line is a URL fragment, not a comment
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            bad += 1
            logger.warning("%s:%d: %r is not an http(s) URL with a host; line skipped", path, number, url)
            continue
        seeds.append(url)
    if not seeds:
        raise SeedError(f"seed file {path} has no http(s) URL ({bad} bad line(s)); one URL per line")
    return seeds
