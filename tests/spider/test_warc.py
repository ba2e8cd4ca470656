"""spider/warc.py: records round-trip through warcio, digests verify, files rotate and are renamed."""
from __future__ import annotations

import base64
import gzip
import hashlib
import os

from warcio.archiveiterator import ArchiveIterator

from spider.warc import OPEN_SUFFIX, RotatingWarcWriter, request_head, response_head


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def write_one(writer: RotatingWarcWriter, url: str, body: bytes, headers=None) -> str:
    headers = headers or [(b"Content-Type", b"text/html; charset=utf-8"), (b"X-Order", b"2")]
    req = request_head("GET", url, [(b"User-Agent", b"test-agent"), (b"Accept", b"*/*")])
    resp = response_head("HTTP/1.1", 200, headers)
    return writer.write_fetch(url, req, b"", resp, body, ip_address="127.0.0.1")


def read_records(path):
    with open(path, "rb") as stream:
        out = []
        for rec in ArchiveIterator(stream, check_digests=True):
            out.append((rec.rec_type, rec.rec_headers, rec.http_headers, rec.content_stream().read(),
                        rec.digest_checker.passed))
        return out


def test_pair_round_trips_with_digests_and_links(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {"config-sha256": "abc"})
    body = b"<html><body>caf\xc3\xa9</body></html>"
    resp_id = write_one(writer, "http://a.weblm.test/p?q=1", body)
    writer.close()
    (path,) = tmp_path.iterdir()
    assert path.name.startswith("t-") and path.name.endswith(".warc.gz")
    records = read_records(path)
    assert [r[0] for r in records] == ["warcinfo", "response", "request"]
    info, resp, req = records
    assert b"config-sha256: abc" in info[3] and b"format: WARC File Format 1.1" in info[3]
    assert all(r[1].protocol == "WARC/1.1" for r in records)
    assert all(r[4] is not False for r in records)  # warcio re-checked every digest present
    assert resp[1].get_header("WARC-Record-ID") == resp_id
    assert req[1].get_header("WARC-Concurrent-To") == resp_id
    assert resp[1].get_header("WARC-Payload-Digest") == sha1_b32(body)
    assert resp[1].get_header("WARC-Block-Digest")
    assert resp[1].get_header("WARC-IP-Address") == "127.0.0.1"
    assert resp[3] == body
    assert resp[2].protocol == "HTTP/1.1" and resp[2].statusline == "200 OK"
    assert [h[0] for h in resp[2].headers] == ["Content-Type", "X-Order"]  # order kept
    assert req[2].protocol == "GET" and req[2].statusline == "/p?q=1 HTTP/1.1"  # origin-form
    assert req[2].get_header("Host") == "a.weblm.test"
    assert req[2].get_header("User-Agent") == "test-agent"


def test_every_record_is_its_own_gzip_member(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    write_one(writer, "http://a.weblm.test/", b"x")
    writer.close()
    (path,) = tmp_path.iterdir()
    with open(path, "rb") as stream:
        offsets = [rec_offset for rec_offset in _member_offsets(stream)]
    assert len(offsets) == 3


def _member_offsets(stream):
    it = ArchiveIterator(stream)
    for _ in it:
        yield it.get_record_offset()


def test_gzip_encoded_body_is_stored_encoded_and_chunked_header_renamed(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    raw = gzip.compress(b"<html>hello</html>")
    write_one(writer, "http://a.weblm.test/z", raw,
              headers=[(b"Content-Encoding", b"gzip"), (b"Transfer-Encoding", b"chunked")])
    writer.close()
    (path,) = tmp_path.iterdir()
    resp = read_records(path)[1]
    assert resp[1].get_header("WARC-Payload-Digest") == sha1_b32(raw)
    assert resp[2].get_header("Transfer-Encoding") is None
    assert resp[2].get_header("X-Crawler-Transfer-Encoding") == "chunked"
    with open(path, "rb") as stream:
        for rec in ArchiveIterator(stream):
            if rec.rec_type == "response":
                assert rec.raw_stream.read() == raw  # as received, not decoded
                break


def test_rotation_by_size_each_file_starts_with_warcinfo(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 2000, {})
    for i in range(12):
        write_one(writer, f"http://a.weblm.test/{i}", bytes(range(256)) * 4)
        assert list(tmp_path.glob("*" + OPEN_SUFFIX)) in ([], [writer._path])
    writer.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 2 and writer.counters.files == len(files)
    assert not list(tmp_path.glob("*" + OPEN_SUFFIX))
    serials = [f.name.split("-")[2] for f in files]
    assert serials == [f"{i:05d}" for i in range(len(files))]
    total = 0
    for f in files:
        records = read_records(f)
        assert records[0][0] == "warcinfo"
        assert [r[0] for r in records[1:]] == ["response", "request"] * ((len(records) - 1) // 2)
        total += (len(records) - 1) // 2
    assert total == 12 == writer.counters.responses
    assert writer.counters.records == 12 * 2 + len(files)
    assert writer.counters.bytes == sum(f.stat().st_size for f in files)


def test_open_suffix_until_closed(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    write_one(writer, "http://a.weblm.test/", b"x")
    (path,) = tmp_path.iterdir()
    assert path.name.endswith(".warc.gz" + OPEN_SUFFIX)
    writer.close()
    writer.close()  # idempotent
    (path,) = tmp_path.iterdir()
    assert path.name.endswith(".warc.gz")
    assert writer.closed_files == [path]


def test_a_closed_file_is_handed_on_renamed_with_the_fetches_it_holds(tmp_path):
    seen = []

    def on_closed(closed):  # by then the final name exists and the .open one is gone
        seen.append((closed, sorted(p.name for p in tmp_path.iterdir())))

    writer = RotatingWarcWriter(tmp_path, "t", 3000, {}, on_closed=on_closed)
    ids = [write_one(writer, f"http://a.weblm.test/{i}", os.urandom(2000)) for i in range(3)]  # one per file
    writer.close()
    assert [c.urls for c, _ in seen] == [("http://a.weblm.test/0",), ("http://a.weblm.test/1",), ("http://a.weblm.test/2",)]
    assert [c.record_ids for c, _ in seen] == [(i,) for i in ids]
    for closed, listing in seen:
        assert closed.path.name in listing and closed.path.name + OPEN_SUFFIX not in listing
        assert closed.bytes == closed.path.stat().st_size


def test_unknown_status_and_non_ascii_headers_do_not_break_the_block(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    req = request_head("GET", "http://a.weblm.test/", [])
    resp = response_head(None, 599, [(b"X-Name", "café".encode("latin-1"))])
    writer.write_fetch("http://a.weblm.test/", req, b"", resp, b"body")
    writer.close()
    (path,) = tmp_path.iterdir()
    resp_rec = read_records(path)[1]
    assert resp_rec[2].statusline == "599 Unknown" and resp_rec[3] == b"body"
