"""Replaying recorded WARC responses by URL, read with warcio."""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import BufferedReader

from localweb.responses import Response

log = logging.getLogger(__name__)

# RFC 9110 §7.6.1 hop-by-hop headers, plus the framing headers we recompute for the de-chunked payload.
DROPPED_HEADERS = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                   "te", "trailer", "trailers", "transfer-encoding", "upgrade", "content-length"}


def url_key(url: str) -> tuple[str, str]:
    """(host, path?query) with scheme and host case-folded and default ports dropped.

    The scheme is not part of the key: the proxy speaks plain http only, so an https capture is
    served for the same http URL (an http capture of the same URL wins). A bare trailing "?" is
    dropped by urlsplit, so `/a?` and `/a` match.
    """
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if parts.port and parts.port not in (80, 443):
        host = f"{host}:{parts.port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return host, target


@dataclass
class ReplayArchive:
    responses: dict[tuple[str, str], Response] = field(default_factory=dict)
    schemes: dict[tuple[str, str], str] = field(default_factory=dict)
    seeds: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)   # responses, revisits_skipped, malformed_skipped, ...

    @property
    def hosts(self) -> set[str]:
        return {host for host, _ in self.responses}

    def lookup(self, host: str, target: str) -> Response | None:
        return self.responses.get(url_key(f"http://{host}{target}"))

    def add_file(self, path: str | Path) -> None:
        path = Path(path)
        first_html: str | None = None
        try:
            with path.open("rb") as stream:
                for record in ArchiveIterator(stream, arc2warc=True):   # ARC files too, with WARC-style headers
                    url = self._add_record(record, path)
                    if url and first_html is None:
                        first_html = url
        except Exception as exc:   # warcio raises several types for broken files; none should stop the server
            self.counts["malformed_skipped"] += 1
            log.warning("replay: %s is malformed after %d responses (%s: %s); the rest of the file is skipped",
                        path, self.counts["responses"], type(exc).__name__, exc)
        self.counts["files"] += 1
        log.info("replay: indexed %s; totals so far %s (revisits have no payload of their own and are skipped)",
                 path, dict(self.counts))
        if first_html:
            self.seeds.append(first_html)
        else:
            log.warning("replay: %s has no 200 text/html response, so it adds no seed", path)

    def _add_record(self, record, path: Path) -> str | None:
        if record.rec_type == "revisit":
            self.counts["revisits_skipped"] += 1
            log.debug("replay: skipping revisit record for %s in %s (no payload of its own)",
                     record.rec_headers.get_header("WARC-Target-URI"), path)
            return None
        if record.rec_type != "response":
            return None
        url = record.rec_headers.get_header("WARC-Target-URI") or ""
        if not url.lower().startswith(("http://", "https://")) or record.http_headers is None:
            self.counts["malformed_skipped"] += 1
            log.warning("replay: skipping response record %r in %s: not an HTTP capture", url, path)
            return None
        try:
            status = int(record.http_headers.get_statuscode())
            # content_stream() de-chunks, and decodes Content-Encoding where warcio supports it.
            body = record.content_stream().read()
        except Exception as exc:
            self.counts["malformed_skipped"] += 1
            log.warning("replay: skipping malformed response for %s in %s (%s: %s)", url, path,
                        type(exc).__name__, exc)
            return None
        encoding = (record.http_headers.get_header("Content-Encoding") or "").lower()
        decoded = encoding in BufferedReader.get_supported_decompressors()
        headers = tuple((k, v) for k, v in record.http_headers.headers
                        if k.lower() not in DROPPED_HEADERS and not (decoded and k.lower() == "content-encoding"))
        key = url_key(url)
        scheme = url.split(":", 1)[0].lower()
        if key in self.responses and not (scheme == "http" and self.schemes[key] == "https"):
            self.counts["duplicates_skipped"] += 1
            return None
        self.responses[key] = Response(status, headers, body)
        self.schemes[key] = scheme
        self.counts["responses"] += 1
        content_type = (record.http_headers.get_header("Content-Type") or "").lower()
        if status == 200 and content_type.startswith("text/html"):
            return f"http://{key[0]}{key[1]}"
        return None


def load_replay(paths) -> ReplayArchive:
    archive = ReplayArchive()
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"replay WARC {path} does not exist; pass existing .warc/.warc.gz files")
        archive.add_file(path)
    log.info("replay: %s", dict(archive.counts))
    return archive
