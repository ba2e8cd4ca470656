"""Scrapy's HTTP/1.1 download handler, recording each exchange's request and response heads as bytes.

Twisted parses a response's status line and headers and Scrapy only ever sees the parsed result:
name case, order, spacing, folded lines and the reason phrase are gone.  A WARC response record
should hold the head as received (WARC 1.1 §6.3), so this handler keeps Scrapy's own
protocol, agent and handler and only tees the bytes on their way through:

- the request head is what Twisted wrote to the socket (request line and headers, up to the
  blank line); the request body is the Scrapy request's body;
- the response head is what arrived before the parser saw it, up to the first blank line after
  a final (non-1xx) status line.

The pair lands in `request.meta[WIRE_META_KEY]` as a `WireHeads`, which the WARC capture
middleware writes.  Neither Scrapy nor warcio exposes these bytes from Scrapy's handler, hence the
subclasses.  `tests/spider/test_wire.py` pins the behaviour, so a Scrapy upgrade that moves these
internals fails there and not silently.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from scrapy.core.downloader.handlers.http11 import (
    HTTP11DownloadHandler,
    _LenientHTTP11ClientFactory,
    _LenientHTTP11ClientProtocol,
    _ScrapyAgent,
)
from scrapy.exceptions import ResponseDataLossError
from scrapy.utils._download_handlers import get_dataloss_msg, wrap_twisted_exceptions
from scrapy.utils.defer import maybe_deferred_to_future

logger = logging.getLogger(__name__)

WIRE_META_KEY = "weblm_wire"
# A head ends at its first empty line; Twisted's line parser accepts a bare LF as a line end too.
HEAD_END = re.compile(rb"\r?\n\r?\n")
INFORMATIONAL = re.compile(rb"^HTTP/\d(?:\.\d)?\s+1\d\d\b")
MAX_HEAD_BYTES = 1 << 20  # a head this long is not recorded raw; the parsed fallback is used


@dataclass(frozen=True)
class WireHeads:
    request: bytes | None  # request line + headers + blank line, as sent
    response: bytes | None  # final status line + headers + blank line, as received


class _TeeTransport:
    """Forwards everything to the real transport and keeps a copy of the bytes of the request head."""

    def __init__(self, transport, sink: bytearray):
        self._transport = transport
        self._sink = sink

    def _keep(self, data: bytes) -> None:
        if HEAD_END.search(self._sink) is None and len(self._sink) < MAX_HEAD_BYTES:
            self._sink.extend(data)

    def write(self, data: bytes) -> None:
        self._keep(data)
        self._transport.write(data)

    def writeSequence(self, seq) -> None:
        seq = list(seq)
        for part in seq:
            self._keep(part)
        self._transport.writeSequence(seq)

    def __getattr__(self, name):
        return getattr(self._transport, name)


class _TeeRequest:
    """A Twisted request whose `writeTo` writes through a `_TeeTransport`; everything else is the request's."""

    def __init__(self, request, sink: bytearray):
        self._request = request
        self._sink = sink

    def writeTo(self, transport):
        return self._request.writeTo(_TeeTransport(transport, self._sink))

    def __getattr__(self, name):
        return getattr(self._request, name)


def _head(buffer: bytes | bytearray, skip_informational: bool = False) -> bytes | None:
    """The head at the start of `buffer` (1xx heads skipped when asked), or None if not complete yet."""
    start = 0
    while True:
        end = HEAD_END.search(buffer, start)
        if end is None or end.end() > MAX_HEAD_BYTES:
            return None
        if skip_informational and INFORMATIONAL.match(buffer, start):
            start = end.end()
            continue
        return bytes(buffer[start:end.end()])


class WireRecordingProtocol(_LenientHTTP11ClientProtocol):
    """Scrapy's lenient HTTP/1.1 client protocol, keeping the raw heads of the exchange in progress."""

    _sent: bytearray
    _received: bytearray | None = None

    def request(self, request):
        self._sent = bytearray()
        self._received = bytearray()
        sent, received = self._sent, self._received
        d = super().request(_TeeRequest(request, self._sent))

        def attach(response):
            # Fires from inside dataReceived once the parser has the whole head, which by then is in `received`.
            response._weblm_wire = WireHeads(_head(sent), _head(received, skip_informational=True))
            return response

        d.addCallback(attach)
        return d

    def dataReceived(self, data: bytes) -> None:
        received = self._received
        if received is not None and len(received) < MAX_HEAD_BYTES and _head(received, True) is None:
            received.extend(data)
        super().dataReceived(data)


class WireRecordingFactory(_LenientHTTP11ClientFactory):
    def buildProtocol(self, addr):
        return WireRecordingProtocol(self._quiescentCallback)


class WireRecordingAgent(_ScrapyAgent):
    def _cb_bodyready(self, txresponse, request):
        request.meta[WIRE_META_KEY] = getattr(txresponse, "_weblm_wire", None)
        return super()._cb_bodyready(txresponse, request)


class WireRecordingDownloadHandler(HTTP11DownloadHandler):
    """Set for http and https in DOWNLOAD_HANDLERS (spider/settings.py)."""

    def __init__(self, crawler):
        super().__init__(crawler)
        self._pool._factory = WireRecordingFactory

    async def download_request(self, request):
        # HTTP11DownloadHandler.download_request of Scrapy 2.19 (pinned), with WireRecordingAgent for
        # _ScrapyAgent: the agent class is hard-wired there, so the method is restated, not extended.
        agent = WireRecordingAgent(
            contextFactory=self._contextFactory,
            bindAddress=self._bind_address,
            pool=self._pool,
            maxsize=self._default_maxsize,
            warnsize=self._default_warnsize,
            fail_on_dataloss=self._fail_on_dataloss,
            crawler=self._crawler,
            tls_verbose_logging=self._tls_verbose_logging,
        )
        try:
            with wrap_twisted_exceptions():
                return await maybe_deferred_to_future(agent.download_request(request))
        except ResponseDataLossError:
            if not self._fail_on_dataloss_warned:
                logger.warning(get_dataloss_msg(request.url))
                self._fail_on_dataloss_warned = True
            raise
