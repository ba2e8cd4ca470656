"""jobs.text.opt_out: a publisher's reservation of text and data mining, read from the archived headers and the
page's head: TDMRep's tdm-reservation, and noai for every crawler or the agents conf names."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from jobs.text.opt_out import HEAD_BYTES, opt_out

WCXB = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "extraction" / "wcxb_dev" / "dev" / "html"

AGENTS = ("weblm-spider", "ccbot")


def page(*metas: str, filler: int = 0) -> bytes:
    return f"<html><head>{' ' * filler}{''.join(metas)}<title>t</title></head><body><p>x</p></body></html>".encode()


@pytest.mark.parametrize("headers, html, found", [
    ({"tdm-reservation": "1"}, b"", "tdm-reservation"),
    ({"tdm-reservation": "0"}, b"", None),                                   # TDMRep: 0 = not reserved
    ({}, page('<meta name="tdm-reservation" content="1">'), "tdm-reservation"),
    ({"x-robots-tag": "noai"}, b"", "noai"),
    ({"x-robots-tag": "noindex, ccbot: noai, nofollow"}, b"", "noai"),      # repeated headers, joined by ingest
    ({"x-robots-tag": "googlebot: noai"}, b"", None),                         # another crawler's
    ({"x-robots-tag": "googlebot: noindex, noai"}, b"", None),                # its scope runs to the next name
    ({"x-robots-tag": "unavailable_after: 25 Jun 2030 15:00:00 PST, noai"}, b"", "noai"),
    ({}, page("<META NAME='Robots' CONTENT='noindex, NoAI'>"), "noai"),
    ({}, page("<meta name='weblm-spider' content='noai'>"), "noai"),
    ({}, page("<meta name='googlebot' content='noai'>"), None),
    ({}, page("<meta name='description' content='we say noai here'>"), None),
    ({}, page("<meta name='robots' content='noindex'>"), None),
    ({}, page("<meta name='robots' content='noarchive,x-custom:1,noai'>"), "noai"),   # no agent scopes in content
    ({}, page("<meta name='robots' content='noai'>", filler=HEAD_BYTES), None),   # past the head's first 64 KiB
    ({}, b"\x00\x01\xff<meta garbage", None),                                  # not HTML: nothing, no error
    (None, None, None),
])
def test_opt_outs(headers, html, found):
    assert opt_out(headers, html, AGENTS) == found


@pytest.mark.skipif(not WCXB.is_dir(), reason="../shared/data/extraction/wcxb_dev is not on this machine")
def test_real_pages_that_say_noai_in_their_meta_robots_are_found():
    def read(name: str) -> bytes:
        return gzip.decompress((WCXB / name).read_bytes())

    # WCXB dev pages as published: a long robots list with valued directives, and a short one
    assert opt_out({}, read("0004.html.gz"), AGENTS) == "noai"   # "noarchive,noai,noimageai,max-snippet:-1,..."
    assert opt_out({}, read("4168.html.gz"), AGENTS) == "noai"   # "index, follow, noai"
    assert opt_out({}, read("0001.html.gz"), AGENTS) is None
