"""WARC records hold HTTP heads byte for byte as they crossed the wire (spider/wire.py).

A raw socket server (rawhttp.py) answers with heads that a parse-and-reserialise round trip would change
(name case, odd spacing, a custom reason phrase, repeated fields, bare-LF line ends, an interim
100 Continue, chunked framing) and keeps every request head it received; the crawl goes through
it as an authenticating forward proxy, so the request record must also drop the credentials.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator

from crawl_helpers import read_warc, run_crawl

HOST = "wire.weblm.test"


def _page(links: list[str]) -> bytes:
    return ("<html><body>" + "".join(f'<a href="{link}">{link}</a>' for link in links)
            + "</body></html>").encode()


INDEX = _page(["/odd", "/bare-lf", "/chunked", "/interim", "/moved"])
ODD_HEAD = (b"HTTP/1.1 200 Fine Thanks\r\nx-Weird-CASE:   spaced  value \r\nSet-Cookie: a=1\r\n"
            b"Set-Cookie: b=2\r\ncontent-type: text/html\r\nContent-Length: %d\r\n\r\n")
BARE_LF_HEAD = b"HTTP/1.1 200 OK\nContent-Type: text/html\nContent-Length: %d\n\n"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
INTERIM = b"HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n"
MOVED_HEAD = b"HTTP/1.1 302 Found It Elsewhere\r\nLocation: /odd?via=moved\r\nContent-Length: 0\r\n\r\n"
BODY = _page([])


def _answer(path: str) -> tuple[bytes, bytes]:
    """(head as sent, what follows it on the wire) for a request path."""
    if path == "/":
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(INDEX), INDEX
    if path.startswith("/odd"):
        return ODD_HEAD % len(BODY), BODY
    if path == "/bare-lf":
        return BARE_LF_HEAD % len(BODY), BODY
    if path == "/chunked":
        half = len(BODY) // 2
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (BODY[:half], BODY[half:])) + b"0\r\n\r\n"
        return CHUNKED_HEAD, chunks
    if path == "/interim":
        return INTERIM + ODD_HEAD % len(BODY), BODY
    if path == "/moved":
        return MOVED_HEAD, b""
    return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b""



def _records(run):
    by_type: dict[str, dict[str, dict]] = {"request": {}, "response": {}}
    for path in run.warc_files:
        for rec in read_warc(path):
            if rec["type"] in by_type:
                url = rec["headers"].get_header("WARC-Target-URI")
                target = urlsplit(url)
                key = target.path + (f"?{target.query}" if target.query else "")
                by_type[rec["type"]][key] = rec
    return by_type


def _stored_head(path) -> dict[str, bytes]:
    """Each record's block, split at the head's end, read from the file without any parser."""
    heads = {}
    with open(path, "rb") as stream:
        for rec in ArchiveIterator(stream, no_record_parse=True):
            if rec.rec_type in ("request", "response"):
                target = urlsplit(rec.rec_headers.get_header("WARC-Target-URI"))
                key = rec.rec_type + " " + target.path + (f"?{target.query}" if target.query else "")
                heads[key] = rec.content_stream().read()
    return heads


def test_heads_are_stored_as_they_crossed_the_wire(tmp_path, raw_server):
    server = raw_server(_answer)
    run = run_crawl([f"http://{HOST}/"], tmp_path,
                    ["proxy=" + server.proxy_url("crawler:s3cret"), "retry_enabled=false",
                     "warc.revisit=false"])  # the pages share one body: here every one is stored in full
    assert run.returncode == 0, run.log[-3000:]
    blocks: dict[str, bytes] = {}
    for path in run.warc_files:
        blocks.update(_stored_head(path))

    for path in ("/", "/odd", "/bare-lf", "/interim", "/moved", "/odd?via=moved"):
        sent = server.sent_heads[path]
        expected = sent[len(INTERIM):] if path == "/interim" else sent  # the final head; 100 is not the answer
        assert blocks[f"response {path}"].startswith(expected), path

        request_block = blocks[f"request {path}"]
        received = server.received[path]
        assert b"Proxy-Authorization" in received  # the proxy got the credentials...
        assert b"s3cret" not in request_block and b"Proxy-Authorization" not in request_block  # ...the archive did not
        kept = b"".join(line for line in received.splitlines(keepends=True)
                        if not line.lower().startswith(b"proxy-authorization"))
        assert request_block == kept, path  # a GET's block is its head only

    # Twisted de-chunks the body it hands over, so the field announcing chunking is renamed (as StormCrawler does)
    chunked = blocks["response /chunked"]
    assert chunked.startswith(CHUNKED_HEAD.replace(b"Transfer-Encoding", b"X-Crawler-Transfer-Encoding"))
    assert chunked.endswith(BODY)
    assert blocks["response /odd"].endswith(BODY)
    scrapy_stats = run.stats["scrapy"]
    assert scrapy_stats["weblm/warc/responses"] == 8  # 7 pages and robots.txt, every one from wire bytes
    assert "weblm/warc/response_head_rebuilt" not in scrapy_stats
    assert "weblm/warc/request_head_rebuilt" not in scrapy_stats


def test_records_with_wire_heads_keep_valid_digests_and_parse(tmp_path, raw_server):
    server = raw_server(_answer)
    run = run_crawl([f"http://{HOST}/"], tmp_path, ["proxy=" + server.proxy_url(), "warc.revisit=false"])
    assert run.returncode == 0, run.log[-3000:]
    records = _records(run)
    odd = records["response"]["/odd"]
    assert odd["digest_ok"] is True
    assert odd["http"].get_statuscode() == "200"
    assert odd["http"].statusline == "200 Fine Thanks"
    assert odd["http"].get_header("x-weird-case") == "spaced  value"
    assert [v for k, v in odd["http"].headers if k.lower() == "set-cookie"] == ["a=1", "b=2"]
    assert odd["raw"] == BODY
    assert records["response"]["/bare-lf"]["raw"] == BODY
    assert records["response"]["/bare-lf"]["digest_ok"] is True
    assert records["response"]["/moved"]["http"].statusline == "302 Found It Elsewhere"
    assert all(rec["digest_ok"] is not False for kind in records.values() for rec in kind.values())
