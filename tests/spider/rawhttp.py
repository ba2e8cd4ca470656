"""A forward proxy on 127.0.0.1 that answers with canned bytes: for heads no HTTP library would write.

`answer(path)` gives (head, what follows it on the wire) for a request path, or None to close the
connection without a word (a network error, as the crawler sees it).  With `by_host=True` the answer is
`answer(host, path)`, for tests that need hosts to behave differently.  Every request head read is
kept by path (with its query), so a test can compare what was sent with what was archived.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Optional
from urllib.parse import urlsplit

Answer = Callable[[str], Optional[tuple[bytes, bytes]]]


class RawHttpServer:
    def __init__(self, answer: Answer, by_host: bool = False):
        self.answer = answer
        self.by_host = by_host
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: dict[str, bytes] = {}
        self.sent_heads: dict[str, bytes] = {}
        self.arrivals: list[tuple[float, str, str]] = []  # (monotonic time, host, path) of every request
        threading.Thread(target=self._serve, daemon=True).start()

    def proxy_url(self, credentials: str = "") -> str:
        return f"http://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn):
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                head += b"\r\n\r\n"
                target = urlsplit(head.split(b" ", 2)[1].decode())
                key = (target.path or "/") + (f"?{target.query}" if target.query else "")
                self.received[key] = head
                self.arrivals.append((time.monotonic(), target.hostname or "", key))
                path = target.path or "/"
                reply = self.answer(target.hostname or "", path) if self.by_host else self.answer(path)
                if reply is None:
                    return  # closes the connection unanswered
                self.sent_heads[key] = reply[0]
                conn.sendall(reply[0] + reply[1])

    def close(self):
        self.sock.close()
