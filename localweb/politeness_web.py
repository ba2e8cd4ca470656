"""The adversarial web (26 hosts under *.hostile.weblm.test) behind one loopback forward proxy, logging
every request at the moment it arrives, so `localweb.judge` can score a crawl's politeness at the server.

    python -m localweb.politeness_web serve [--port P] [--hits-out HITS.jsonl] [-o key=value ...]
    python -m localweb.politeness_web seeds | truth --out TRUTH.json

It reuses localweb's proxy (SEAMS §1) with a handler that differs in three ways: a request is logged
when it arrives, not when it is answered (a slow page's gap is measured from the crawler's send);
an answer can be cut short of its Content-Length; and an answer can never come (status 0 in the log).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from pathlib import Path

from localweb.hits import Hit, Hits
from localweb.hostile import HostileConfig, HostileWeb, Truth, hostile_config
from localweb.hostile.broken import NEVER, RawResponse
from localweb.proxy import ProxyHandler, ProxyServer, serve_until_signalled
from localweb.responses import Response, problem

log = logging.getLogger(__name__)


class ArrivalLoggingHandler(ProxyHandler):
    def _serve(self, send_body: bool) -> None:
        host, target, error = self._route_target()
        response = error or self.server.router(host, target) or problem(
            502, "Bad Gateway", f"unknown host {host!r}: this proxy serves only the adversarial web's hosts")
        self.server.hits.record(self.command, host, target, response.status)
        if response.delay_seconds and self.server.stopping.wait(response.delay_seconds):
            return   # the server is stopping: drop the slow or hanging answer
        if response.status == NEVER:
            self.close_connection = True
            return
        self._send(response, host, target, send_body)

    def _send(self, response: Response, host: str, target: str, send_body: bool,
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        raw = response if isinstance(response, RawResponse) else None
        body = raw.build() if raw and raw.build else response.body
        length = raw.declared_length if raw and raw.declared_length is not None else len(body)
        try:
            self.send_response(response.status)
            for name, value in (*response.headers, *extra):
                self.send_header(name, value)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if send_body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("client went away before %s %s%s was answered", self.command, host, target)
            self.close_connection = True
        if length != len(body):
            self.close_connection = True   # the rest of the promised body never comes


class ArrivalLoggingProxy(ProxyServer):
    def __init__(self, address, router, hits, known_hosts):
        super().__init__(address, router, hits, known_hosts)
        self.RequestHandlerClass = ArrivalLoggingHandler

    def handle_error(self, request, client_address) -> None:
        """A crawler hanging up (timeouts, cancelled downloads) is routine here, not a traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            log.debug("client %s hung up", client_address)
            return
        super().handle_error(request, client_address)


class PolitenessWeb:
    """with PolitenessWeb(cfg) as web: crawl through web.proxy_url, then judge(web.hits.log(), web.truth, delay)."""

    def __init__(self, cfg: HostileConfig | None = None, port: int = 0):
        self.cfg = cfg or HostileConfig()
        self.web = HostileWeb(self.cfg)
        self.hits = Hits()
        self._port = port
        self._server: ArrivalLoggingProxy | None = None
        self._thread: threading.Thread | None = None

    @property
    def hosts(self) -> list[str]:
        return self.web.hosts

    @property
    def seeds(self) -> list[str]:
        return self.web.seeds

    @property
    def truth(self) -> Truth:
        return self.web.truth

    @property
    def proxy_url(self) -> str:
        if self._server is None:
            raise RuntimeError("PolitenessWeb is not serving: call start() or use it as a context manager")
        return f"http://{self.cfg.bind_host}:{self._server.server_address[1]}"

    def start(self) -> "PolitenessWeb":
        if self._server is None:
            known = set(self.web.hosts)
            self._server = ArrivalLoggingProxy((self.cfg.bind_host, self._port), self.web.respond, self.hits,
                                               lambda: known)
            self._thread = threading.Thread(target=self._server.serve_forever, name="politeness-web", daemon=True)
            self._thread.start()
            log.info("adversarial web: %d hosts, %d reachable allowed pages, at %s",
                     len(self.hosts), len(self.truth), self.proxy_url)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stopping.set()   # wakes slow and hanging answers
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> "PolitenessWeb":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def dump_hits(hits: list[Hit], path: str | Path) -> None:
    """One JSON object per request, in arrival order; `at` is the server's monotonic clock (only gaps matter)."""
    with open(path, "w") as out:
        for hit in hits:
            out.write(json.dumps({"at": hit.at, "method": hit.method, "host": hit.host, "target": hit.target,
                                  "status": hit.status}) + "\n")


def load_hits(path: str | Path) -> list[Hit]:
    return [Hit(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localweb.politeness_web", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("serve", "seeds", "truth"):
        p = sub.add_parser(name)
        p.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a localweb.hostile.config.HostileConfig default, e.g. -o slow_seconds=1")
    serve, truth = sub.choices["serve"], sub.choices["truth"]
    serve.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)")
    serve.add_argument("--hits-out", help="write the request log here (JSON lines) when stopped")
    truth.add_argument("--out", required=True, help="JSON file for the ground truth")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    web = PolitenessWeb(hostile_config(args.override), port=getattr(args, "port", 0))
    if args.command == "seeds":
        print("\n".join(web.seeds))
    elif args.command == "truth":
        web.truth.dump(args.out)
        print(f"wrote the truth for {len(web.hosts)} hosts ({len(web.truth)} reachable allowed pages) to {args.out}",
              file=sys.stderr)
    else:
        serve_until_signalled(web)
        if args.hits_out:
            dump_hits(web.hits.log(), args.hits_out)
            print(f"wrote {len(web.hits.log())} requests to {args.hits_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
