"""The HTTP forward proxy that serves the local web on loopback.

stdlib http.server is enough here: this is a test and demo fixture, not a production server.
It never opens an outgoing socket: every answer comes from the generated web or a WARC replay.
"""
from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlsplit

from localweb.hits import Hits
from localweb.responses import Response, problem

log = logging.getLogger(__name__)

Router = Callable[[str, str], "Response | None"]   # (host, target) -> response, None for an unknown host


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True        # a client that hangs up mid-keep-alive must not block shutdown
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], router: Router, hits: Hits, known_hosts: Callable[[], set[str]]):
        super().__init__(address, ProxyHandler)
        self.router, self.hits, self.known_hosts = router, hits, known_hosts
        self.stopping = threading.Event()    # wakes the slow page's sleep on shutdown


class ProxyHandler(BaseHTTPRequestHandler):
    # head and body go out in two writes: with Nagle on, the body waits ~40 ms for the client's delayed ACK
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"    # keep-alive, as Scrapy speaks to proxies; every answer has Content-Length
    server: ProxyServer
    server_version = "weblm-localweb/1"

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def _refuse_method(self) -> None:
        # logged under the host asked for, so that a test can tell a page's CONNECT or POST from the browser's own
        if self.command == "CONNECT":   # authority form, host:port
            host, target = self.path.rsplit(":", 1)[0].lower(), self.path
        else:
            host, target, _ = self._route_target()
        self._send(problem(405, "Method Not Allowed",
                           f"{self.command} is not supported: the local web serves GET and HEAD over plain http "
                           "(https and CONNECT are not proxied; use http:// URLs)"), host, target, True,
                   extra=(("Allow", "GET, HEAD"), ("Connection", "close")))
        self.close_connection = True   # any request body is unread, so this connection cannot carry another request

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_CONNECT = _refuse_method

    def _serve(self, send_body: bool) -> None:
        host, target, error = self._route_target()
        if error is not None:
            self._send(error, host, target, send_body)
            return
        response = self.server.router(host, target)
        if response is None:
            response = problem(502, "Bad Gateway",
                               f"unknown host {host!r}: this local web proxy serves only its generated hosts and "
                               "replayed WARC hosts, and never forwards to a real network")
        if response.delay_seconds:
            # Waits, but wakes at once when the server stops, so tests never hang on shutdown.
            if self.server.stopping.wait(response.delay_seconds):
                return
        self._send(response, host, target, send_body)

    def _route_target(self) -> tuple[str, str, Response | None]:
        """(host, path?query, error) from an absolute-form URI, or from Host for origin-form."""
        if self.path.startswith("/"):
            host = (self.headers.get("Host") or "").lower()
            bare = host.rsplit(":", 1)[0] if ":" in host and not host.endswith("]") else host
            if bare in self.server.known_hosts():
                return bare, self.path, None
            return host, self.path, problem(
                400, "Bad Request",
                f"this server is an HTTP forward proxy: send absolute URIs (GET http://news.weblm.test/ HTTP/1.1), "
                f"e.g. set it as the http proxy; Host {host!r} is not one of its sites")
        parts = urlsplit(self.path)
        if parts.scheme.lower() != "http" or not parts.hostname:
            return parts.hostname or "", self.path, problem(
                400, "Bad Request", f"cannot proxy {self.path!r}: only absolute http:// URLs are served")
        host = parts.hostname.lower()
        if parts.port and parts.port != 80:
            host = f"{host}:{parts.port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return host, target, None

    def _send(self, response: Response, host: str, target: str, send_body: bool,
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.server.hits.record(self.command, host, target, response.status)
        try:
            self.send_response(response.status)
            for name, value in (*response.headers, *extra):
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if send_body:
                self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. timed out on the slow page): nothing left to answer.
            log.debug("client went away before %s %s%s was answered", self.command, host, target)
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def serve_until_signalled(web) -> None:
    """Serve `web` (a context manager with proxy_url and seeds) until SIGTERM or SIGINT; prints the ready line
    `{"proxy": ..., "seeds": [...]}` that scripts wait for (SEAMS §1)."""
    import json
    import signal

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with web:
        print(json.dumps({"proxy": web.proxy_url, "seeds": web.seeds}), flush=True)
        stop.wait()
