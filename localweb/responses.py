"""What a route answers: status, headers, body, and an optional delay before answering."""
from __future__ import annotations

import gzip
import html
from dataclasses import dataclass


@dataclass(frozen=True)
class Response:
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay_seconds: float = 0.0    # the slow page sleeps this long before sending anything

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


def html_response(body: str | bytes, status: int = 200, charset: str | None = "utf-8",
                  gzipped: bool = False, extra: tuple[tuple[str, str], ...] = ()) -> Response:
    data = body.encode(charset or "utf-8") if isinstance(body, str) else body
    content_type = f"text/html; charset={charset}" if charset else "text/html"
    headers = [("Content-Type", content_type), *extra]
    if gzipped:
        # mtime=0 keeps the compressed bytes identical from run to run.
        data = gzip.compress(data, mtime=0)
        headers.append(("Content-Encoding", "gzip"))
        headers.append(("Vary", "Accept-Encoding"))
    return Response(status, tuple(headers), data)


def text_response(body: str, status: int = 200, extra: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, (("Content-Type", "text/plain; charset=utf-8"), *extra), body.encode("utf-8"))


def problem(status: int, title: str, detail: str) -> Response:
    """A short HTML error page that says what was wrong and what to do."""
    page = (f"<!DOCTYPE html>\n<html><head><title>{status} {html.escape(title)}</title></head>"
            f"<body><h1>{status} {html.escape(title)}</h1><p>{html.escape(detail)}</p></body></html>\n")
    return html_response(page, status=status)


def redirect(status: int, location: str) -> Response:
    body = f'<!DOCTYPE html>\n<html><body><p>Moved to <a href="{html.escape(location)}">{html.escape(location)}</a></p></body></html>\n'
    return html_response(body, status=status, extra=(("Location", location),))
