"""When a fetched page comes back, and how it is asked for again.

A recrawl is a conditional request: the validators of the page's last 200 answer (its `ETag` and `Last-Modified`)
go out as `If-None-Match` and `If-Modified-Since` (RFC 9110 §13.1), so a page that has not changed costs its server
a `304 Not Modified` head instead of its body.  The 304 is archived as it came off the wire, as a revisit record of
WARC's server-not-modified profile that names the capture those validators came from (its URL, date and record id,
kept in the state as `capture` once the 200's record is named: spider/frontier/scheduler.py).

With `frontier.adaptive_recrawl` each page keeps its own interval, as Nutch's AdaptiveFetchSchedule does: it
starts at `recrawl_after_s` (or `hot_recrawl_after_s` for seeds and sitemaps), grows by `recrawl_inc_rate` each time
the page comes back unchanged (a 304, or the same body) and shrinks by `recrawl_dec_rate` each time it changed,
within [`recrawl_min_s`, `recrawl_max_s`].  So pages that never change are asked for less and less often, and a
news front page settles near the minimum.

What a page's recrawl needs travels in its frontier payload (`weblm_recrawl` in the request meta): the validators,
a digest of the last body, its capture and the interval; nothing in the backends' schema.  It rides in every
recrawled URL's record, so it is kept small: one-letter keys, no empty validator, a whole interval without its ".0"
(a state written with the longer keys of before is still read).  It costs Redis ~256 B a URL record
(conf/crawl_plan.yaml url_record_bytes; bench/frontier_ops.py --only memory).  The decision per answer is a pure
function here; the scheduler (spider/frontier/scheduler.py) applies it.
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

META_KEY = "weblm_recrawl"
# the state's keys, one letter each (the state rides in every recrawled URL's record); the longer names of before
ETAG, LAST_MODIFIED, DIGEST, INTERVAL, CAPTURE = "t", "m", "d", "i", "c"
_BEFORE = {ETAG: "etag", LAST_MODIFIED: "last_modified", DIGEST: "digest", INTERVAL: "interval", CAPTURE: "capture"}
_UUID_ID = "<urn:uuid:"   # warcio's WARC-Record-IDs: <urn:uuid:...>


def get(state: Mapping[str, Any] | None, key: str) -> Any:
    """A field of the state (ETAG, LAST_MODIFIED, DIGEST, INTERVAL, CAPTURE), in either spelling; None if absent."""
    if not state:
        return None
    value = state.get(key)
    return state.get(_BEFORE[key]) if value is None else value


def conditional_headers(state: Mapping[str, Any] | None) -> dict[str, str]:
    """The headers that make a recrawl conditional on the page having changed since its last 200."""
    headers = {}
    if get(state, ETAG):
        headers["If-None-Match"] = get(state, ETAG)
    if get(state, LAST_MODIFIED):
        headers["If-Modified-Since"] = get(state, LAST_MODIFIED)
    return headers


def body_digest(body: bytes) -> str:
    """A short digest of an answer's body, to tell an unchanged page from servers that send no validators."""
    return hashlib.blake2b(body, digest_size=12).hexdigest()


def observe(state: Mapping[str, Any] | None, status: int, headers: Mapping[str, str], body: bytes,
            start_s: float, f) -> dict[str, Any] | None:
    """The page's recrawl state after this answer, or None when the answer says nothing about the page's content (a
    redirect, an error: the state stays as it was).  `start_s` is the page's first interval; `f` the frontier
    settings (adaptive_recrawl, recrawl_min_s, recrawl_max_s, recrawl_inc_rate, recrawl_dec_rate)."""
    if status == 304:
        if not state:
            return None
        changed = False
        new = {key: get(state, key) for key in (ETAG, LAST_MODIFIED, DIGEST, CAPTURE)}
    elif 200 <= status < 300:
        digest = body_digest(body)
        changed = bool(state) and get(state, DIGEST) != digest
        new = {ETAG: headers.get("etag"), LAST_MODIFIED: headers.get("last-modified"), DIGEST: digest}
    else:
        return None
    interval = interval_of(state, start_s)
    if state and f.adaptive_recrawl:
        interval *= (1 - f.recrawl_dec_rate) if changed else (1 + f.recrawl_inc_rate)
        interval = min(max(interval, f.recrawl_min_s), f.recrawl_max_s)
    new = {key: value for key, value in new.items() if value}   # no empty validator, no capture yet
    interval = round(interval, 3)
    new[INTERVAL] = int(interval) if interval.is_integer() else interval
    new["changed"] = changed
    return new


def capture(date: str, record_id: str, url: str, frontier_url: str) -> list[str]:
    """The capture a later 304 refers to, compact (it rides in every recrawled URL's payload): [WARC-Date, the
    record id's UUID] and the URL only when it is not the frontier's (the 200 came through a redirect)."""
    uuid = record_id[len(_UUID_ID):-1] if record_id.startswith(_UUID_ID) and record_id.endswith(">") else record_id
    return [date, uuid] if url == frontier_url else [date, uuid, url]


def captured(state: Mapping[str, Any] | None, url: str) -> tuple[str, str, str] | None:
    """(URL, WARC-Date, WARC-Record-ID) of the capture `capture()` kept in `state`, or None."""
    kept = get(state, CAPTURE)
    if not kept:
        return None
    date, uuid, *other = kept
    return (other[0] if other else url), date, (uuid if uuid.startswith("<") else f"{_UUID_ID}{uuid}>")


def interval_of(state: Mapping[str, Any] | None, start_s: float) -> float:
    """The wait before the page's next fetch: its own interval once it has one, else `start_s`."""
    interval = get(state, INTERVAL)
    return float(interval) if interval else start_s
