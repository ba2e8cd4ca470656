"""A static file server over real HTTP that misbehaves as busy public servers do (data.commoncrawl.org under load):

    python tests/support/flaky_web.py PORT DIR [--busy N] [--head-busy N] [--cut N] [--stall N] [--no-ranges]

`--busy N`: the first N GET requests for each path are answered `503 Slow Down` with `Retry-After: 1`.
`--head-busy N`: the first N HEAD requests for each path are answered 503 too.
`--cut N`: the next N GETs of a path send the headers (full Content-Length) and half the body, then close the
connection.  `--stall N`: the N GETs after those send half the body and then nothing, holding the connection open
for a minute (a client killed meanwhile has half a copy).  Files carry an `ETag` and `Last-Modified` from their size
and modification time, as static servers send them.  `GET /` answers `ready` (a readiness probe).  Every other
request is served from DIR, with byte ranges (`Range: bytes=a-`, `bytes=a-b`) unless `--no-ranges`.  One line per
request goes to stderr before its answer is sent (so a client that has its answer finds it logged):
`METHOD path range -> outcome`.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from collections import Counter
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("folder")
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument("--cut", type=int, default=0)
    parser.add_argument("--stall", type=int, default=0)
    parser.add_argument("--no-ranges", action="store_true")
    parser.add_argument("--head-busy", type=int, default=0)
    args = parser.parse_args()
    gets: Counter = Counter()
    heads: Counter = Counter()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):   # our own line per request instead
            pass

        def _note(self, outcome: str) -> None:
            sys.stderr.write(f"{self.command} {self.path} {self.headers.get('Range') or '-'} -> {outcome}\n")
            sys.stderr.flush()

        def _file(self):
            path = os.path.join(args.folder, self.path.lstrip("/").split("?")[0])
            return path if os.path.isfile(path) else None

        def _asked(self, counter: Counter) -> int | None:
            """How many times this path was asked with this method, this time included; None (answered 404) for a
            path that is no file."""
            if self._file() is None:
                self._note("404")
                return self.send_error(404)
            with lock:
                counter[self.path] += 1
                return counter[self.path]

        def _slow_down(self, body: bytes) -> None:
            self._note("503")
            self.send_response(503)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _version(self) -> None:
            stat = os.stat(self._file())
            self.send_header("ETag", f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"')
            self.send_header("Last-Modified", formatdate(stat.st_mtime, usegmt=True))

        def do_HEAD(self):
            n = self._asked(heads)
            if n is None:
                return
            if n <= args.head_busy:
                return self._slow_down(b"")
            path = self._file()
            self._note("200")
            self.send_response(200)
            self.send_header("Content-Length", str(os.path.getsize(path)))
            self._version()
            if not args.no_ranges:
                self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self):
            if self.path == "/":   # the readiness probe: not a file, not counted, not logged
                self.send_response(200)
                self.send_header("Content-Length", "5")
                self.end_headers()
                self.wfile.write(b"ready")
                return
            n = self._asked(gets)
            if n is None:
                return
            if n <= args.busy:
                return self._slow_down(b"Slow Down")
            data = open(self._file(), "rb").read()
            start, end, status = 0, len(data) - 1, 200
            wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if wanted and not args.no_ranges:
                start, status = int(wanted.group(1)), 206
                end = min(int(wanted.group(2)), end) if wanted.group(2) else end
            body = data[start:end + 1]
            cut = n <= args.busy + args.cut
            stall = not cut and n <= args.busy + args.cut + args.stall
            self._note(f"{status} cut after {len(body) // 2} of {len(body)} bytes" if cut
                       else f"{status} stalled after {len(body) // 2} of {len(body)} bytes" if stall
                       else f"{status} {len(body)} bytes")
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self._version()
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            if not args.no_ranges:
                self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if stall:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                time.sleep(60)
                self.close_connection = True
                return
            if cut:
                self.wfile.write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return self.connection.shutdown(2)
            self.wfile.write(body)

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
