"""spider/warc.py: records round-trip through warcio, digests verify, files rotate and are renamed;
metadata and revisit records; a failed write leaves the file whole."""
from __future__ import annotations

import base64
import errno
import gzip
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from warcio.archiveiterator import ArchiveIterator

from spider.frontier.backend import DigestSeen
from spider.warc import OPEN_SUFFIX, Fetch, LocalDigestIndex, RotatingWarcWriter, request_head, response_head
from spider.warc_salvage import salvage


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


# --- metadata and revisit records, rotation by age, a failed write (spider/warc.py) --------------------------

def fetch_of(url: str, body: bytes, status: int = 200, metadata=None, truncated=None) -> Fetch:
    return Fetch(url, request_head("GET", url, [(b"User-Agent", b"test-agent")]), b"",
                 response_head("HTTP/1.1", status, [(b"Content-Type", b"text/html")]), body,
                 ip_address="127.0.0.1", metadata=metadata, truncated=truncated)


def only_file(folder):
    (path,) = folder.iterdir()
    return path


def test_a_metadata_record_follows_the_response_and_names_it(tmp_path):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    fields = {"fetchTimeMs": "12", "fetchDate": "2025-01-01T00:00:00.000000Z", "depth": "2",
              "via": "http://a.weblm.test/", "politenessKey": "a.weblm.test"}
    written = writer.write(fetch_of("http://a.weblm.test/p", b"<html>p</html>", metadata=fields))
    writer.close()
    records = read_records(only_file(tmp_path))
    # the request stays last: it ends a fetch for spider/warc_salvage.py
    assert [r[0] for r in records] == ["warcinfo", "response", "metadata", "request"]
    _, resp, meta, req = records
    assert meta[1].get_header("Content-Type") == "application/warc-fields"
    assert meta[1].get_header("WARC-Concurrent-To") == written.record_id == resp[1].get_header("WARC-Record-ID")
    assert meta[1].get_header("WARC-Target-URI") == "http://a.weblm.test/p"
    assert meta[1].get_header("WARC-Date") == resp[1].get_header("WARC-Date") == req[1].get_header("WARC-Date")
    assert meta[3].decode().splitlines() == [f"{k}: {v}" for k, v in fields.items()]
    assert req[1].get_header("WARC-Concurrent-To") == written.record_id
    assert all(r[4] is not False for r in records)
    assert writer.counters.records == 4 and writer.counters.responses == 1


def test_a_payload_stored_before_becomes_a_revisit_with_its_head_and_no_payload(tmp_path):
    digests = LocalDigestIndex()
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    body = b"<html>the same page under two names</html>"
    first = writer.write(fetch_of("http://a.weblm.test/one", body), digests)
    again = writer.write(fetch_of("http://b.weblm.test/two", body), digests)
    closed = []
    writer.on_closed = closed.append
    writer.close()
    assert first.revisit_of is None and again.revisit_of is not None
    records = read_records(only_file(tmp_path))
    assert [r[0] for r in records] == ["warcinfo", "response", "request", "revisit", "request"]
    resp, revisit, req = records[1], records[3], records[4]
    h = revisit[1]
    assert h.get_header("WARC-Profile") == "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    assert h.get_header("WARC-Refers-To-Target-URI") == "http://a.weblm.test/one"
    assert h.get_header("WARC-Refers-To-Date") == resp[1].get_header("WARC-Date")
    assert h.get_header("WARC-Refers-To") == resp[1].get_header("WARC-Record-ID") == first.record_id
    assert h.get_header("WARC-Payload-Digest") == resp[1].get_header("WARC-Payload-Digest") == sha1_b32(body)
    assert h.get_header("WARC-Block-Digest") and revisit[4] is not False
    assert revisit[2].statusline == "200 OK" and revisit[2].get_header("Content-Type") == "text/html"
    assert revisit[3] == b""  # the payload is the first capture's
    assert req[1].get_header("WARC-Concurrent-To") == again.record_id == h.get_header("WARC-Record-ID")
    # both are fetches to acknowledge
    assert closed[0].urls == ("http://a.weblm.test/one", "http://b.weblm.test/two")
    assert closed[0].record_ids == (first.record_id, again.record_id)
    assert (writer.counters.responses, writer.counters.revisits) == (1, 1)


def test_a_304_to_a_conditional_recrawl_is_a_server_not_modified_revisit_naming_the_capture(tmp_path):
    from dataclasses import replace

    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    url = "http://a.weblm.test/p"
    before = DigestSeen(url, "2026-12-01T10:00:00.000000Z", "<urn:uuid:00000000-0000-0000-0000-000000000001>")
    asked = replace(fetch_of(url, b"", status=304), conditional=True, not_modified_of=before)
    kept = writer.write(asked, LocalDigestIndex())
    writer.write(replace(fetch_of(url, b"", status=304), conditional=True))        # its capture unknown
    writer.write(fetch_of(url, b"", status=304))                                   # a 304 nobody asked for
    writer.close()
    records = read_records(only_file(tmp_path))
    assert [r[0] for r in records] == ["warcinfo", "revisit", "request", "revisit", "request", "response", "request"]
    known, unknown = records[1][1], records[3][1]
    assert known.get_header("WARC-Record-ID") == kept.record_id and kept.revisit_of is None
    for h in (known, unknown):
        assert h.get_header("WARC-Profile") == "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
        assert h.get_header("WARC-Refers-To-Target-URI") == url
        assert h.get_header("WARC-Payload-Digest") is None   # the profile forbids it
    assert known.get_header("WARC-Refers-To") == before.record_id
    assert known.get_header("WARC-Refers-To-Date") == before.date
    assert unknown.get_header("WARC-Refers-To") is None and unknown.get_header("WARC-Refers-To-Date") is None
    assert records[1][2].statusline == "304 Not Modified" and all(r[4] is not False for r in records)
    assert (writer.counters.responses, writer.counters.revisits) == (1, 2)


def test_empty_non_2xx_and_truncated_payloads_are_always_stored_in_full(tmp_path):
    digests = LocalDigestIndex()
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    for url in ("http://a.weblm.test/x", "http://a.weblm.test/y"):
        writer.write(fetch_of(url, b""), digests)                                   # empty
        writer.write(fetch_of(url + "404", b"<html>not found</html>", status=404), digests)
        writer.write(fetch_of(url + "301", b"moved", status=301), digests)
        writer.write(fetch_of(url + "cut", b"<html>half a pa", truncated="disconnect"), digests)
    writer.close()
    kinds = [r[0] for r in read_records(only_file(tmp_path))]
    assert "revisit" not in kinds and kinds.count("response") == 8
    assert writer.counters.revisits == 0


def test_a_failing_digest_index_costs_space_not_records(tmp_path):
    class Down:
        def firsts(self, items):
            raise ConnectionError("frontier store unreachable")

    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    writer.write(fetch_of("http://a.weblm.test/1", b"same"), Down())
    writer.write(fetch_of("http://a.weblm.test/2", b"same"), Down())
    writer.close()
    assert [r[0] for r in read_records(only_file(tmp_path))].count("response") == 2
    assert writer.counters.digest_index_errors == 2


def test_local_digest_index_is_an_atomic_test_and_set():
    index = LocalDigestIndex()
    seen = [DigestSeen(f"http://a.weblm.test/{i}", "2025-01-01T00:00:00Z", f"<urn:uuid:{i}>") for i in range(50)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda s: index.firsts([("sha1:SAME", s)])[0], seen))
    firsts = [s for s, answer in zip(seen, answers) if answer is None]
    assert len(firsts) == 1 and all(answer == firsts[0] for answer in answers if answer is not None)


def test_rotation_by_age_at_a_write_and_when_idle(tmp_path):
    now = [1000.0]
    closed = []
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {}, on_closed=closed.append, max_file_age_s=60,
                                clock=lambda: now[0])
    writer.write(fetch_of("http://a.weblm.test/1", b"1"))
    now[0] += 30
    writer.write(fetch_of("http://a.weblm.test/2", b"2"))
    assert not closed and not writer.close_if_old()
    now[0] += 30  # the file is 60 s old: the next write closes it after itself
    writer.write(fetch_of("http://a.weblm.test/3", b"3"))
    assert [c.urls for c in closed] == [("http://a.weblm.test/1", "http://a.weblm.test/2", "http://a.weblm.test/3")]
    writer.write(fetch_of("http://a.weblm.test/4", b"4"))  # a new file, whose age starts now
    now[0] += 59
    assert not writer.close_if_old()
    now[0] += 1  # idle, but old: the timer's check closes it
    assert writer.close_if_old()
    assert [c.urls for c in closed][1] == ("http://a.weblm.test/4",)
    assert not writer.close_if_old() and not writer.flush()  # nothing open: nothing to do
    assert not list(tmp_path.glob("*" + OPEN_SUFFIX))


def test_flush_closes_the_file_only_when_it_holds_a_fetch(tmp_path):
    closed = []
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {}, on_closed=closed.append)
    assert not writer.flush() and not list(tmp_path.iterdir())
    writer.write(fetch_of("http://a.weblm.test/1", b"1"))
    assert writer.flush()
    assert [c.urls for c in closed] == [("http://a.weblm.test/1",)]
    assert not writer.flush()


def test_a_failed_write_is_cut_off_the_file_which_stays_whole(tmp_path, monkeypatch):
    writer = RotatingWarcWriter(tmp_path, "t", 10**9, {})
    writer.write(fetch_of("http://a.weblm.test/1", os.urandom(3000)))
    real_write = os.write
    calls = []

    def disk_full_midway(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:1000])  # a short write, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full_midway)
    with pytest.raises(OSError):
        writer.write(fetch_of("http://a.weblm.test/2", os.urandom(3000)))
    monkeypatch.setattr(os, "write", real_write)
    writer.write(fetch_of("http://a.weblm.test/3", os.urandom(3000)))
    closed = []
    writer.on_closed = closed.append
    writer.close()
    records = read_records(only_file(tmp_path))
    assert [(r[0], r[1].get_header("WARC-Target-URI")) for r in records[1:]] == [
        ("response", "http://a.weblm.test/1"), ("request", "http://a.weblm.test/1"),
        ("response", "http://a.weblm.test/3"), ("request", "http://a.weblm.test/3")]
    assert all(r[4] is not False for r in records)
    assert closed[0].urls == ("http://a.weblm.test/1", "http://a.weblm.test/3")
    assert closed[0].bytes == only_file(tmp_path).stat().st_size == writer.counters.bytes


def test_a_killed_writers_file_with_metadata_is_salvaged_to_whole_fetches(tmp_path):
    writer = RotatingWarcWriter(tmp_path / "w", "t", 10**9, {})
    for i in range(3):
        writer.write(fetch_of(f"http://a.weblm.test/{i}", os.urandom(1500), metadata={"depth": str(i)}))
    data = writer._path.read_bytes()
    writer._file.close()
    left = tmp_path / "t-20250101000000-00000-4242.warc.gz.open"
    left.write_bytes(data[:-200])  # killed while writing the third fetch's request
    result = salvage(left)
    kinds = [r[0] for r in read_records(result.salvaged)]
    assert kinds == ["warcinfo"] + ["response", "metadata", "request"] * 2 and result.fetches == 2
