"""Speaking absolute-form HTTP to the local web proxy, as a crawler with `proxy` set does."""
from __future__ import annotations

import http.client
from pathlib import Path
from urllib.parse import urlsplit

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
IANA = SHARED / "warc" / "pywb" / "warcs" / "iana.warc.gz"
BAD_WARC = SHARED / "warc" / "pywb" / "warcs" / "example-bad.warc.gz.bad"

# Small and quick: fewer pages, a 1.5 s "slow" page, a 400 kB "large" page.
SMALL = ["pages_per_host=6", "index_page_size=4", "slow_page_seconds=1.5", "large_page_bytes=400000",
         "mirror_exact=2", "mirror_near=2"]


def fetch(web, url: str, method: str = "GET", timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One request through the proxy, absolute-form, no redirect following, no decompression."""
    proxy = urlsplit(web.proxy_url)
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=timeout)
    try:
        conn.request(method, url)   # http.client sends an absolute URL as-is and derives Host from it
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()
