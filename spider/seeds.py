"""Seed files: one URL per line; blank lines and `#` comments are skipped.  A local path or a URI."""
from __future__ import annotations

import logging
import os
from urllib.parse import urlsplit

import storage

logger = logging.getLogger(__name__)


class SeedError(ValueError):
    """A seed file that yields no crawlable URL."""


def read_seeds(path: str | os.PathLike) -> list[str]:
    """Valid http(s) URLs of the file, in order; each bad line is logged with its number and skipped."""
    path = os.fspath(path)
    try:
        text = storage.read_bytes(path).decode("utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        raise SeedError(f"seed file {path} does not exist; pass --seeds FILE (scrapy crawl: -a seeds=FILE) or "
                        f"set paths.seeds") from None
    except Exception as exc:  # noqa: BLE001  (s3fs and gcsfs raise their clients' errors, not only OSError)
        raise SeedError(f"seed file {path} cannot be read ({type(exc).__name__}: {exc}); check the path and, "
                        f"for a URI, the store's credentials and conf/storage.yaml") from None
    seeds, bad = [], 0
    for number, line in enumerate(text.splitlines(), 1):
        url = line.strip()
        if not url or url.startswith("#"):  # a '#' later in the line is a URL fragment, not a comment
            continue
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (raises on a port out of range, as an unclosed "[" does in urlsplit)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            bad += 1
            logger.warning("%s:%d: %r is not a valid http(s) URL with a host; line skipped", path, number, url)
            continue
        seeds.append(url)
    if not seeds:
        raise SeedError(f"seed file {path} has no http(s) URL ({bad} bad line(s)); one URL per line")
    return seeds
