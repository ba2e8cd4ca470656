"""spider/warc_salvage.py and the buffer lock: what a killed crawl leaves becomes whole files or stays put."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from spider.warc import RotatingWarcWriter, request_head, response_head
from spider.warc_salvage import salvage
from spider.warc_upload import BufferInUse, WarcUploads
from storage.config import UploadSettings


def open_file_with_fetches(folder: Path, n: int) -> bytes:
    """The bytes of a writer's `.open` file holding `n` fetches, as a killed crawl leaves it once flushed."""
    writer = RotatingWarcWriter(folder, "t", 10**9, {})
    for i in range(n):
        writer.write_fetch(f"http://a.weblm.test/{i}", request_head("GET", f"http://a.weblm.test/{i}", []), b"",
                           response_head("HTTP/1.1", 200, [(b"Content-Type", b"text/html")]), os.urandom(2000))
    writer._file.flush()
    data = writer._path.read_bytes()
    writer._file.close()
    writer._path.unlink()
    return data


def fetch_ends(data: bytes, tmp: Path) -> list[int]:
    """Byte offset where each fetch (response + request record) ends."""
    path = tmp / "whole.warc.gz"
    path.write_bytes(data)
    with open(path, "rb") as stream:
        records = ArchiveIterator(stream)
        starts = [(records.get_record_offset(), rec.rec_type) for rec in records]
    path.unlink()
    nexts = [s for s, _ in starts[1:]] + [len(data)]
    return [end for (_, kind), end in zip(starts, nexts) if kind == "request"]


def records_of(path: Path) -> list[tuple[str, str | None, bool | None]]:
    with open(path, "rb") as stream:
        out = []
        for rec in ArchiveIterator(stream, check_digests=True):
            rec.content_stream().read()
            out.append((rec.rec_type, rec.rec_headers.get_header("WARC-Target-URI"), rec.digest_checker.passed))
        return out


def left_open(folder: Path, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "t-20250101000000-00000-4242.warc.gz.open"
    path.write_bytes(data)
    return path


def test_a_cut_anywhere_keeps_exactly_the_whole_fetches_before_it(tmp_path):
    data = open_file_with_fetches(tmp_path, 4)
    ends = fetch_ends(data, tmp_path)
    for cut in [*range(0, len(data), 53), *ends, len(data)]:
        result = salvage(left_open(tmp_path / f"cut-{cut}", data[:cut]))
        whole = sum(end <= cut for end in ends)
        assert result.fetches == whole and not result.source.exists() and result.damaged is None
        if whole == 0:
            assert result.salvaged is None and list(result.source.parent.iterdir()) == []
            continue
        assert result.salvaged.name == "t-20250101000000-00000-4242.salvaged.warc.gz"
        assert result.salvaged.read_bytes() == data[:ends[whole - 1]], f"cut at {cut}"
        records = records_of(result.salvaged)
        assert [kind for kind, _, _ in records] == ["warcinfo"] + ["response", "request"] * whole
        assert all(ok is not False for _, _, ok in records)


@pytest.mark.parametrize("cut_into_next", [0, 1, 37, 100, 400])
def test_zeros_after_a_power_loss_are_a_cut_not_damage(tmp_path, cut_into_next):
    """Whether zlib trips over the zeros or reads them as deflate data depends on where the cut fell."""
    data = open_file_with_fetches(tmp_path, 3)
    ends = fetch_ends(data, tmp_path)
    result = salvage(left_open(tmp_path / "z", data[:ends[1] + cut_into_next] + bytes(4096)))
    assert result.fetches == 2 and result.damaged is None
    assert result.salvaged.read_bytes() == data[:ends[1]]


def test_damage_in_the_middle_keeps_the_original_beside_the_whole_fetches(tmp_path):
    data = bytearray(open_file_with_fetches(tmp_path, 3))
    ends = fetch_ends(bytes(data), tmp_path)
    data[ends[0] + 500] ^= 0xFF  # a flipped byte inside the second fetch: the gzip CRC no longer matches
    source = left_open(tmp_path / "d", bytes(data))
    result = salvage(source)
    assert result.fetches == 1 and result.salvaged.read_bytes() == bytes(data[:ends[0]])
    assert result.damaged.name == "t-20250101000000-00000-4242.warc.gz.damaged"
    assert result.damaged.read_bytes() == bytes(data), "the damaged original is kept as it was, for a person"


def test_one_crawl_per_buffer(tmp_path):
    quick = UploadSettings(retries=1, backoff_initial_s=0.01, backoff_max_s=0.01, workers=1)
    first = WarcUploads(tmp_path / "buffer", str(tmp_path / "warc"), on_durable=lambda warc: None, settings=quick)
    with pytest.raises(BufferInUse, match=rf"{tmp_path / 'buffer'} is in use by another crawl \(pid {os.getpid()}\)"):
        WarcUploads(tmp_path / "buffer", str(tmp_path / "warc"), on_durable=lambda warc: None, settings=quick)
    assert first.finish(timeout_s=5)
    second = WarcUploads(tmp_path / "buffer", str(tmp_path / "warc"), on_durable=lambda warc: None, settings=quick)
    assert second.finish(timeout_s=5)  # the lock goes with the crawl that held it
