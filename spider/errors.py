"""Names for the ways a fetch fails, for the `errors` counters of the crawl stats (SEAMS §2)."""
from __future__ import annotations

import zlib

from twisted.internet import defer
from twisted.internet import error as tx
from twisted.python.failure import Failure
from twisted.web._newclient import ResponseFailed, ResponseNeverReceived

from scrapy.exceptions import (CannotResolveHostError, DownloadCancelledError,
                               DownloadConnectionRefusedError, DownloadFailedError, DownloadTimeoutError,
                               IgnoreRequest, ResponseDataLossError)
from scrapy.spidermiddlewares.httperror import HttpError

# Checked in order; the first match names the failure.
KINDS: list[tuple[str, tuple[type[BaseException], ...]]] = [
    ("timeout", (DownloadTimeoutError, tx.TimeoutError, defer.TimeoutError)),
    ("connection_refused", (DownloadConnectionRefusedError, tx.ConnectionRefusedError)),
    ("dns", (CannotResolveHostError, tx.DNSLookupError)),
    # Scrapy cancels a download only when it passes DOWNLOAD_MAXSIZE (http11._ResponseReader).
    ("too_large", (DownloadCancelledError, defer.CancelledError)),
    ("data_loss", (ResponseDataLossError,)),
    ("bad_encoding", (zlib.error,)),  # a body whose Content-Encoding does not decode (broken gzip)
    # Scrapy's download handlers (2.19 here) hand a ResponseFailed (closed or reset before a whole answer) on as this
    ("connection_lost", (tx.ConnectionLost, tx.ConnectionDone, ResponseFailed, ResponseNeverReceived,
                         tx.ConnectError, DownloadFailedError)),
]


def failure_kind(failure: Failure) -> str:
    """`http_404`, `timeout`, `robots_denied`, ... ; an unknown exception is named by its class."""
    if failure.check(HttpError):
        return f"http_{failure.value.response.status}"
    if failure.check(IgnoreRequest):
        message = str(failure.value).lower()
        if "robots.txt" in message:
            return "robots_denied"
        if "offsite" in message:
            return "offsite"
        if "download_maxsize" in message:  # HttpCompressionMiddleware: a body that decompresses past the cap
            return "too_large"
        return "ignored"
    for kind, types in KINDS:
        if failure.check(*types):
            return kind
    return type(failure.value).__name__
