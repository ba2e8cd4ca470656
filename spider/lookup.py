"""`python -m spider.lookup URL [URL ...] [--urls FILE] [--json] [-o key=value ...]`: where URLs stand in the frontier.

The frontier conf/crawl.yaml names (`-o frontier.url=redis://...` for a cluster's; the embedded one by default), read
only, while a crawl runs or after it stopped.  Each URL is put in the form the scheduler gives it (its session and
tracking parameters stripped, then canonicalised: any spelling finds it) and told:
- queued, and how many URLs of its host are before it; when the host may be fetched next, or that a fetch of it is
  in flight;
- leased by a worker until a time, held (fetched, its WARC record not yet durable), or due for a recrawl at a time;
- seen but not in the frontier: fetched or refused (`python -m jobs.fate` tells which, from the lake);
- never admitted, and what would refuse it: the admission rules (scheme, trap, calendar, private address), a host
  outside the crawl's scope, the host's budget, robots.txt or TDMRep rules the frontier has cached for the host;
  otherwise no page linked to it (or a link was refused as too deep, and may be admitted by a shorter path).
The host's politeness record comes with it: its delay, errors in a row, Retry-After, URLs admitted.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import storage
from conf import ConfigError, split_paths_overrides
from conf.paths import load_paths
from spider.config import load_crawl_config
from spider.frontier import frontier_file, open_backend
from spider.frontier.admission import Admission
from spider.frontier.backend import NewUrl
from spider.frontier.bloom import url_hashes
from spider.frontier.canonical import Canonicalizer
from spider.frontier.politeness import politeness_key
from spider.frontier.robots import parse
from spider.frontier.scheduler import robots_key


def lookup(backend, cfg, url: str) -> dict:
    """One URL's place in `backend`, as a dict (the JSON `--json` prints)."""
    canon = Canonicalizer(cfg.frontier.strip_params)
    try:
        stripped = canon.strip(url.strip())
        if Admission(cfg, set()).reason(stripped, 0) == "malformed":
            raise ValueError("its host or port is not one")
        key = canon.key(stripped)
        host = politeness_key(stripped, cfg.frontier.politeness_key)
    except ValueError as exc:  # no canonical form: the crawl can neither queue nor fetch it
        return {"url": url, "error": f"not a URL the crawl can fetch ({exc})"}
    place = backend.where(NewUrl(key.hex(), host, stripped, 0, "", url_hashes(key)))
    state = backend.host_state(host)
    out = {"url": url, "canonical": canon.canonical(stripped), "id": key.hex(), "host": host, **asdict(place),
           "host_state": asdict(state),  # delay_s < 0: not set yet, download_delay_s applies
           "delay_s": state.delay_s if state.delay_s >= 0 else cfg.download_delay_s}
    if place.state is None and not place.seen:
        out["refused_by"] = refusals(backend, cfg, stripped, place, state.admitted)
    return out


def refusals(backend, cfg, url: str, place, admitted: int) -> list[str]:
    """What would keep `url`, never admitted, out of the frontier, as far as the frontier knows."""
    out = []
    reason = Admission(cfg, set()).reason(url, 0)
    if reason:
        out.append(f"admission: {reason}")
    if not place.in_scope:
        out.append("scope: its host is not in the crawl's scope (not a seed's host nor in allowed_hosts)")
    if 0 < cfg.max_pages_per_host <= admitted:
        out.append(f"host budget: {admitted} URLs admitted, max_pages_per_host {cfg.max_pages_per_host}")
    record = backend.robots_get(robots_key(url))
    if record is not None:
        rules = parse(record)
        if cfg.obey_robots and not rules.allowed(url, cfg.user_agent):
            out.append(f"robots.txt: disallowed ({record.status}, cached {_when(record.fetched_at)})")
        if cfg.frontier.tdmrep == "respect" and rules.reserved(url):
            out.append("TDMRep: its host's file reserves text and data mining on it")
    return out


def render(found: dict) -> str:
    lines = [found["url"]]
    if "error" in found:
        return "\n".join([*lines, f"  {found['error']}"])
    if found["canonical"] != found["url"]:
        lines.append(f"  in the frontier's form: {found['canonical']}")
    state = found["state"]
    if state == "queued":
        lines.append(f"  queued, {found['ahead']} URL(s) of {found['host']} before it")
    elif state == "leased":
        lines.append(f"  leased by {found['owner']} until {_when(found['until'])}")
    elif state == "held":
        lines.append(f"  fetched by {found['owner']}; its WARC record is not durable yet (held until "
                     f"{_when(found['until'])})")
    elif state == "due":
        lines.append(f"  fetched; due for a recrawl at {_when(found['until'])}")
    elif found["seen"]:
        lines.append("  seen, not in the frontier: fetched or refused (python -m jobs.fate URL tells which)")
    else:
        lines.append("  never admitted to the frontier")
        lines += [f"    {why}" for why in found["refused_by"]] or [
            "    nothing here refuses it: no page linked to it yet (or only from too deep; "
            "still in a worker's buffer if the crawl runs)"]
    host = found["host_state"]
    facts = ["a fetch in flight" if found["host_busy"] else
             f"next fetch at {_when(found['host_next'])}" if found["host_next"] is not None else "nothing queued",
             f"{host['admitted']} URL(s) admitted", "in scope" if found["in_scope"] else "not in scope",
             "delay {:g} s".format(found["delay_s"])]
    if host["errors"]:
        facts.append(f"{host['errors']} error(s) in a row")
    if host["blocked_until"] > time.time():
        facts.append(f"Retry-After until {_when(host['blocked_until'])}")
    lines.append(f"  host {found['host']}: " + "; ".join(facts))
    return "\n".join(lines)


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spider.lookup", description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="*", metavar="URL")
    parser.add_argument("--urls", dest="url_file", help="a file of URLs, one per line (# comments); local or a URI")
    parser.add_argument("--json", action="store_true", help="one JSON object per URL, a line each")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a conf/crawl.yaml setting (frontier.url=redis://...); paths.KEY=VALUE "
                             "overrides conf/paths.yaml")
    args = parser.parse_args(argv)
    try:
        crawl_overrides, path_overrides = split_paths_overrides(args.override)
        paths, cfg = load_paths(path_overrides), load_crawl_config(crawl_overrides)
        if args.url_file:
            args.urls += [line.strip() for line in storage.read_text(args.url_file).splitlines()
                          if line.strip() and not line.lstrip().startswith("#")]
        if not args.urls:
            raise ValueError("name at least one URL (or --urls FILE)")
    except (ConfigError, ValueError, OSError) as exc:
        print(f"spider.lookup: {exc}", file=sys.stderr)
        return 2
    if cfg.frontier.url.startswith(("redis://", "rediss://", "redis+cluster://")):
        from spider.frontier.redis_backend import unreachable
        why = unreachable(cfg.frontier.url)
        if why:
            print(f"spider.lookup: the frontier's Redis does not answer ({why})", file=sys.stderr)
            return 1
    elif not Path(frontier_file(cfg, paths.local)).exists():  # opening it would make an empty one
        print(f"spider.lookup: no frontier at {frontier_file(cfg, paths.local)} (frontier.url "
              f"{cfg.frontier.url or 'embedded'}): no crawl ran with this configuration", file=sys.stderr)
        return 1
    backend = open_backend(cfg, paths.local)
    try:
        for url in args.urls:
            found = lookup(backend, cfg, url)
            print(json.dumps(found, sort_keys=True) if args.json else render(found))
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
