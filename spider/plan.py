"""`python -m spider.plan [--json] [--pages N] [--refresh-days D] [...]`: what a crawl of N pages needs.

Workers, machines, bandwidth, WARC storage, Redis memory and DNS load for one crawl, from a handful of inputs
whose defaults live in conf/crawl_plan.yaml (every setting there is also a flag).  The formulas, in the order
they are computed (every rate in pages/s, every size in decimal bytes):

    pass_s        = refresh_days x 86,400                       one full pass of `pages` must fit in this
    required      = pages / pass_s
    hosts         = hosts, or pages / max_pages_per_host        0: every host at its budget, the fewest hosts
    host_cycle_s  = fetch_s + delay_s x (1 + delay_jitter / 2)  a host is fetched, then rests: one fetch at a time
                                                                per host (the frontier leases one URL per host) and
                                                                the gap runs from the end of one fetch
    per host      <= 1 / host_cycle_s                           (1 / delay_s is the ceiling if fetches took no time)
    hosts needed  = required x host_cycle_s                     hosts with a fetch in flight or resting (Little's law)
    largest host  = max_pages_per_host x host_cycle_s           no pass ends before its biggest host is done
    polite max    = pages / largest host                        <= hosts / host_cycle_s, as no host exceeds the max
    rate          = min(required, polite max)                   below required: the crawl is politeness-bound
    per worker    = min(cpu_pages_per_s, concurrent_requests / fetch_s)
                                                                a worker is CPU-bound or concurrency-bound; the
                                                                delay holds no slot, since the frontier hands out
                                                                only hosts whose turn has come (Little's law again)
    workers       = ceil(rate / per worker),  machines = ceil(workers / cores_per_machine)   one process per core
    bandwidth in  = rate x transfer_bytes x 8;  WARC upload out = rate x warc bytes per fetch x 8
    warc/fetch    = warc_bytes_per_fetch, or (transfer_bytes + warc_overhead_bytes) / warc_compression_ratio
    storage       = pages x warc/fetch per pass;  x recrawl_fraction per later period;  x replication on disk
    Redis         = Bloom filter (spider/frontier/bloom.py's layout for bloom_capacity, bloom_fp_rate)
                  + URL records x url_record_bytes (every page while recrawls are scheduled, else the queued peak)
                  + pages x digest_bytes + hosts x (host_record_bytes + robots_txt_bytes)
    host revisit  = max(host_cycle_s, hosts / rate)             the frontier serves the longest-waiting host first,
                                                                so it rotates over every host with work
    DNS lookups   = rate / (1 + dns_cache_ttl_s / (host revisit x workers))
                                                                a worker's cache holds an address dns_cache_ttl_s;
                                                                a host's next fetch may land on any worker
    robots.txt    = hosts x (1 + active_s / robots_ttl_s) / pass,  active_s = min(pages per host x revisit, pass)
                                                                frontier.tdmrep asks each host's TDMRep file
                                                                with its robots.txt: as many requests again

The worked example (the defaults): 10 B pages every 30 days need 3,858 pages/s; at 4 pages/s per worker
(16 slots / 4 s per fetch) that is 965 workers on 61 sixteen-core machines, and 10 B x 122 kB = 1.22 PB of
WARC per pass.

Why 4 pages/s per worker when the anchors (../shared/notes/crawler-anchors.md §2) say "plan for 10-50 polite
pages/s per Scrapy process": that range is what one core processes (scrapy bench: ~3,000 pages/min = 50/s on a
trivial spider, docs/topics/benchmarking.rst; Frontera: <= 1,200 pages/min = 20/s per spider), so
cpu_pages_per_s is 20.  On the open web a worker runs out of request slots first: Heritrix's 600 threads made
153 URI/s (heritrix3#498), ~3.9 s per URI per thread, hence fetch_s = 4, and crawl.yaml's 16 concurrent requests
then give 16 / 4 = 4 pages/s.  scrapy-cluster's polite figure agrees: 5 crawlers on one machine, "almost 1000
requests per minute" (crawlingresponsibly.rst), ~3.3/s each.  The table says when raising concurrent_requests
(to cpu_pages_per_s x fetch_s) would make each worker CPU-bound and the cluster 5x smaller.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any

from conf import ConfigError, build, conf_dir, read_section
from spider.frontier.bloom import BloomLayout

SECTION = "crawl_plan"
DAY_S = 86_400


@dataclass(frozen=True)
class PlanConfig:
    pages: int
    refresh_days: float
    recrawl_fraction: float
    hosts: int
    max_pages_per_host: int
    delay_s: float
    delay_jitter: float
    fetch_s: float
    concurrent_requests: int
    cpu_pages_per_s: float
    cores_per_machine: int
    transfer_bytes: int
    warc_overhead_bytes: int
    warc_compression_ratio: float
    warc_bytes_per_fetch: int
    replication: float
    bloom_fp_rate: float
    bloom_capacity: int
    url_record_bytes: int
    digest_bytes: int
    host_record_bytes: int
    robots_txt_bytes: int
    queued_fraction: float
    redis_node_gb: float
    dns_cache_ttl_s: float
    robots_ttl_s: float

    def __post_init__(self) -> None:
        at_least = {"pages": 1, "hosts": 0, "concurrent_requests": 1, "cores_per_machine": 1, "transfer_bytes": 1,
                    "replication": 1, "max_pages_per_host": 0, "warc_overhead_bytes": 0, "warc_bytes_per_fetch": 0,
                    "bloom_capacity": 0, "url_record_bytes": 0, "digest_bytes": 0, "host_record_bytes": 0,
                    "robots_txt_bytes": 0, "delay_s": 0, "delay_jitter": 0, "dns_cache_ttl_s": 0}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ValueError(f"{_flag(name)} must be at least {low}, got {getattr(self, name)}")
        for name in ("refresh_days", "fetch_s", "cpu_pages_per_s", "warc_compression_ratio", "redis_node_gb",
                     "robots_ttl_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{_flag(name)} must be above 0, got {getattr(self, name)}")
        for name in ("recrawl_fraction", "queued_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{_flag(name)} is a fraction between 0 and 1, got {getattr(self, name)}")
        if not 0 < self.bloom_fp_rate < 1:
            raise ValueError(f"--bloom-fp-rate must be between 0 and 1 (exclusive), got {self.bloom_fp_rate}")
        if not self.hosts and not self.max_pages_per_host:
            raise ValueError("--hosts and --max-pages-per-host cannot both be 0: give the number of hosts, or the "
                             "largest host's pages (or both)")
        if self.hosts > self.pages:
            raise ValueError(f"--hosts ({self.hosts:,}) is more than --pages ({self.pages:,}): every host counted "
                             f"must have a page to fetch")
        if self.hosts and self.max_pages_per_host and self.pages > self.hosts * self.max_pages_per_host:
            raise ValueError(f"{self.pages:,} pages do not fit in {self.hosts:,} hosts x {self.max_pages_per_host:,} "
                             f"pages per host: raise --hosts or --max-pages-per-host (conf/crawl.yaml "
                             f"max_pages_per_host caps the URLs a host may get), or pass --max-pages-per-host 0")


def plan(cfg: PlanConfig) -> dict[str, Any]:
    """Every output of the planner, as plain numbers (the --json document)."""
    pass_s = cfg.refresh_days * DAY_S
    required = cfg.pages / pass_s

    # politeness: one fetch at a time per host, then a rest of delay_s (x jitter)
    host_cycle_s = cfg.fetch_s + cfg.delay_s * (1 + cfg.delay_jitter / 2)
    hosts = cfg.hosts or math.ceil(cfg.pages / cfg.max_pages_per_host)  # every host at its budget: the fewest
    largest = cfg.max_pages_per_host or math.ceil(cfg.pages / hosts)
    min_pass_s = largest * host_cycle_s
    polite_max = cfg.pages / min_pass_s
    hosts_needed = required * host_cycle_s
    bound = required > polite_max
    rate = polite_max if bound else required
    actual_pass_s = cfg.pages / rate

    # workers: a slot is held fetch_s per page; the core does cpu_pages_per_s at most
    slots_rate = cfg.concurrent_requests / cfg.fetch_s
    per_worker = min(cfg.cpu_pages_per_s, slots_rate)
    workers = math.ceil(rate / per_worker - 1e-9)
    machines = math.ceil(workers / cfg.cores_per_machine)
    cpu_bound_concurrency = math.ceil(cfg.cpu_pages_per_s * cfg.fetch_s)

    # bytes on the wire and in the store
    derived = (cfg.transfer_bytes + cfg.warc_overhead_bytes) / cfg.warc_compression_ratio
    warc_per_fetch = cfg.warc_bytes_per_fetch or derived  # a pilot crawl's measured figure wins
    pass_bytes = cfg.pages * warc_per_fetch
    period_bytes = pass_bytes * cfg.recrawl_fraction

    # the frontier in Redis
    bloom = _bloom(cfg.bloom_capacity or cfg.pages, cfg.bloom_fp_rate, cfg.pages)
    url_records = cfg.pages if cfg.recrawl_fraction > 0 else math.ceil(cfg.pages * cfg.queued_fraction)
    url_bytes = url_records * cfg.url_record_bytes
    digest_bytes = cfg.pages * cfg.digest_bytes
    host_bytes = hosts * (cfg.host_record_bytes + cfg.robots_txt_bytes)
    redis_total = bloom["bytes"] + url_bytes + digest_bytes + host_bytes
    masters = math.ceil(redis_total / (cfg.redis_node_gb * 1e9))

    # DNS and robots.txt: the frontier rotates over every host with work
    revisit_s = max(host_cycle_s, hosts / rate)
    dns = rate / (1 + cfg.dns_cache_ttl_s / (revisit_s * workers))
    active_s = min(cfg.pages / hosts * revisit_s, actual_pass_s)
    robots = hosts * (1 + active_s / cfg.robots_ttl_s) / actual_pass_s

    return {
        "inputs": asdict(cfg),
        "rate": {"required_pages_per_s": required, "pages_per_s": rate,
                 "recrawl_pages_per_s": rate * cfg.recrawl_fraction, "pass_days": actual_pass_s / DAY_S},
        "workers": {"per_worker_pages_per_s": per_worker,
                    "bound": "cpu" if cfg.cpu_pages_per_s <= slots_rate else "concurrency",
                    "workers": workers, "machines": machines,
                    "concurrent_requests_for_cpu_bound": cpu_bound_concurrency,
                    "workers_if_cpu_bound": math.ceil(rate / cfg.cpu_pages_per_s - 1e-9)},
        "politeness": {"bound": bound, "host_cycle_s": host_cycle_s, "max_pages_per_s_per_host": 1 / host_cycle_s,
                       "hosts_needed": math.ceil(hosts_needed - 1e-9), "hosts": hosts,
                       "hosts_enough": hosts_needed <= hosts,
                       "largest_host_pages": largest, "largest_host_s": min_pass_s,
                       "max_pages_per_s": polite_max, "min_pass_days": min_pass_s / DAY_S},
        "network": {"in_mbit_s": rate * cfg.transfer_bytes * 8 / 1e6,
                    "warc_out_mbit_s": rate * warc_per_fetch * 8 / 1e6},
        "storage": {"warc_bytes_per_fetch": warc_per_fetch, "pass_bytes": pass_bytes,
                    "pass_bytes_stored": pass_bytes * cfg.replication, "period_bytes": period_bytes,
                    "period_bytes_stored": period_bytes * cfg.replication,
                    "pass_bytes_uncompressed": pass_bytes * cfg.warc_compression_ratio},
        "frontier": {"bloom_bytes": bloom["bytes"], "bloom_bits_per_url": bloom["bytes"] * 8 / cfg.pages,
                     "bloom_stages": bloom["stages"], "bloom_capacity": cfg.bloom_capacity or cfg.pages,
                     "url_records": url_records, "url_record_bytes": url_bytes, "digest_bytes": digest_bytes,
                     "host_bytes": host_bytes, "total_bytes": redis_total, "redis_masters": masters,
                     "partitions_at_least": 3 * masters},
        "dns": {"lookups_per_s": dns, "robots_txt_per_s": robots, "host_revisit_s": revisit_s},
    }


def _bloom(capacity: int, fp_rate: float, urls: int) -> dict[str, int]:
    """Bytes of the frontier's scalable Bloom filter once `urls` are in it: the stages allocated so far, whole."""
    layout = BloomLayout(capacity=capacity, fp_rate=fp_rate)
    try:
        last = layout.stage_for(urls - 1)
    except OverflowError:
        raise ValueError(f"--bloom-capacity {capacity:,} is too small for {urls:,} URLs: the filter would need more "
                         f"stages than it can grow; use 0 (= pages)") from None
    return {"bytes": sum(stage.bytes for stage in layout.stages[:last + 1]), "stages": last + 1}


# --- the report ---------------------------------------------------------------------------------------------------

def render(result: dict[str, Any]) -> str:
    i, r, w, p = result["inputs"], result["rate"], result["workers"], result["politeness"]
    n, s, f, d = result["network"], result["storage"], result["frontier"], result["dns"]
    rows: list[tuple[str, str, str]] = []

    def section(title: str) -> None:
        rows.append((title, "", ""))

    def row(label: str, value: str, why: str = "") -> None:
        rows.append(("  " + label, value, why))

    section("rate")
    row("required fetch rate", f"{_num(r['required_pages_per_s'])} pages/s",
        f"= {i['pages']:,} pages / ({_g(i['refresh_days'])} d x 86,400 s)")
    if p["bound"]:
        row("POLITENESS-BOUND rate", f"{_num(r['pages_per_s'])} pages/s",
            f"a full pass takes {_g(r['pass_days'], 3)} d, not {_g(i['refresh_days'])} d (see politeness)")
    row("recrawl rate, later periods", f"{_num(r['recrawl_pages_per_s'])} pages/s",
        f"= rate x recrawl_fraction {_g(i['recrawl_fraction'])}")

    section("workers")
    row("per worker", f"{_g(w['per_worker_pages_per_s'], 3)} pages/s",
        f"= min(cpu {_g(i['cpu_pages_per_s'])}, concurrent_requests {i['concurrent_requests']} / "
        f"fetch_s {_g(i['fetch_s'])}): {w['bound']}-bound")
    row("workers (processes)", f"{w['workers']:,}", "= ceil(rate / per worker), one per core")
    row("machines", f"{w['machines']:,}", f"= ceil(workers / {i['cores_per_machine']} cores)")
    if w["bound"] == "concurrency":
        row("  (concurrency-bound)", f"{w['workers_if_cpu_bound']:,} workers",
            f"with concurrent_requests >= {w['concurrent_requests_for_cpu_bound']} (= cpu x fetch_s) "
            f"each is CPU-bound")

    section("politeness")
    row("host cycle", f"{_g(p['host_cycle_s'], 3)} s",
        f"= fetch_s {_g(i['fetch_s'])} + delay_s {_g(i['delay_s'])} x (1 + jitter {_g(i['delay_jitter'])} / 2)")
    row("max rate per host", f"{_g(p['max_pages_per_s_per_host'], 3)} pages/s",
        "= 1 / host cycle (1 / delay_s is the ceiling)")
    row("hosts needed in parallel", f"{p['hosts_needed']:,}",
        f"= required x host cycle; {p['hosts']:,} given: {'enough' if p['hosts_enough'] else 'TOO FEW'}")
    row(f"largest host ({p['largest_host_pages']:,} pages)", _duration(p["largest_host_s"]),
        f"= pages x host cycle; {'LONGER THAN' if p['bound'] else 'within'} the {_g(i['refresh_days'])} d period")
    row("max polite rate", f"{_num(p['max_pages_per_s'])} pages/s",
        f"= pages / largest host's time: a pass takes at least {_g(p['min_pass_days'], 3)} d")

    section("network")
    row("bandwidth in", f"{_num(n['in_mbit_s'])} Mbit/s", f"= rate x transfer_bytes {i['transfer_bytes']:,} x 8")
    row("WARC upload out", f"{_num(n['warc_out_mbit_s'])} Mbit/s",
        "= rate x WARC bytes per fetch x 8 (warc_dir on s3://)")

    section("storage (compressed WARC)")
    per_fetch_why = ("measured (warc_bytes_per_fetch)" if i["warc_bytes_per_fetch"] else
                     f"= (transfer {i['transfer_bytes']:,} + overhead {i['warc_overhead_bytes']:,}) / "
                     f"ratio {_g(i['warc_compression_ratio'])}")
    row("per fetch", _bytes(s["warc_bytes_per_fetch"]), per_fetch_why)
    row("one full pass", _bytes(s["pass_bytes"]),
        f"= pages x per fetch; {_bytes(s['pass_bytes_stored'])} stored at replication {_g(i['replication'])}")
    row("per later refresh period", _bytes(s["period_bytes"]),
        "= pass x recrawl_fraction; unchanged payloads become revisit records, so less")

    section("frontier (Redis)")
    row("Bloom filter", _bytes(f["bloom_bytes"]),
        f"{_g(f['bloom_bits_per_url'], 3)} bits/URL at fp {i['bloom_fp_rate']:g}, {f['bloom_stages']} stage(s); "
        f"frontier.bloom_capacity: {f['bloom_capacity']}")
    row("URL records", _bytes(f["url_record_bytes"]),
        f"{f['url_records']:,} x {i['url_record_bytes']} B "
        f"({'kept for recrawl' if i['recrawl_fraction'] > 0 else 'queued peak'})")
    row("payload digests", _bytes(f["digest_bytes"]), f"pages x {i['digest_bytes']} B (revisit records)")
    row("hosts", _bytes(f["host_bytes"]), f"hosts x ({i['host_record_bytes']} + robots.txt {i['robots_txt_bytes']}) B")
    row("total", _bytes(f["total_bytes"]),
        "one Redis server" if f["redis_masters"] <= 1 else
        f"Redis Cluster: {f['redis_masters']:,} masters at {_g(i['redis_node_gb'])} GB, "
        f"frontier.partitions >= {f['partitions_at_least']:,}")

    section("DNS")
    row("lookups", f"{_num(d['lookups_per_s'])} /s",
        f"each host comes back every {_duration(d['host_revisit_s'])}, to any of {w['workers']:,} workers; "
        f"cache {_g(i['dns_cache_ttl_s'])} s")
    row("robots.txt fetches", f"{_num(d['robots_txt_per_s'])} /s",
        f"once per host and per {_duration(i['robots_ttl_s'])} of work")

    width = [max(len(row[k]) for row in rows) for k in (0, 1)]
    head = (f"Crawl plan: {i['pages']:,} pages every {_g(i['refresh_days'])} days: {_num(r['pages_per_s'])} pages/s, "
            f"{_count(w['workers'], 'worker')} on {_count(w['machines'], 'machine')}, "
            f"{_bytes(s['pass_bytes'])} of WARC per pass, {_bytes(f['total_bytes'])} of Redis"
            + (" (POLITENESS-BOUND)" if p["bound"] else ""))
    lines = [head, ""] + [f"{a:<{width[0]}}  {b:>{width[1]}}  {c}".rstrip() for a, b, c in rows]
    if p["bound"]:
        lines += ["", f"The crawl is politeness-bound: at most {_num(p['max_pages_per_s'])} pages/s, a full pass in "
                      f"{_g(p['min_pass_days'], 3)} days. Spread the pages over more hosts, or cap pages per host "
                      f"lower (crawl.yaml max_pages_per_host), or accept the longer pass; workers above are sized "
                      f"for it."]
    return "\n".join(lines)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.3g}"


def _g(x: float, digits: int = 6) -> str:
    return f"{x:.{digits}g}"


def _bytes(x: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"


def _duration(seconds: float) -> str:
    for unit, size in (("d", DAY_S), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


# --- the command line ---------------------------------------------------------------------------------------------

def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _int(text: str) -> int:
    """An integer, also written 1e10 or 10_000_000_000."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(value)


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _yaml_comments() -> dict[str, str]:
    """Each setting's one-line comment in conf/crawl_plan.yaml: the flags' help."""
    try:
        text = (conf_dir() / f"{SECTION}.yaml").read_text()
    except OSError:
        return {}
    return {m[1]: m[3] for m in re.finditer(r"^(\w+):\s*(\S+)\s+#\s*(.*)$", text, re.MULTILINE)}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m spider.plan", usage="%(prog)s [--json] [--SETTING N ...]",
                                 description="Crawl capacity planner: workers, machines, bandwidth, WARC storage, "
                                             "Redis memory and DNS load for one crawl.",
                                 epilog="Defaults: conf/crawl_plan.yaml (and $WEBLM_CONF_OVERLAY). Formulas: "
                                        "spider/plan.py's docstring. Numbers may be written 1e10 or 10_000_000_000.")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON (for machines)")
    comments = _yaml_comments()
    for f in fields(PlanConfig):
        names = [_flag(f.name)] + (["--days"] if f.name == "refresh_days" else [])
        ap.add_argument(*names, dest=f.name, type=_int if f.type in (int, "int") else _float, default=None,
                        metavar="N", help=comments.get(f.name, "").replace("%", "%%"))
    return ap


def load_plan_config(given: dict[str, Any]) -> PlanConfig:
    """conf/crawl_plan.yaml (plus overlays), with the flags given on top."""
    data = read_section(SECTION)
    data.update({k: v for k, v in given.items() if v is not None})
    return build(PlanConfig, data, where=SECTION)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = vars(ap.parse_args(argv))
    as_json = args.pop("json")
    try:
        result = plan(load_plan_config(args))
    except (ConfigError, ValueError) as exc:
        ap.error(str(exc))  # exits 2
    print(json.dumps(result, indent=2) if as_json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
