"""Score a crawl of the adversarial web from the server's request log, as an outside harness does:
the crawler's own counters are not trusted, only what arrived at the server.

    python -m localweb.judge --hits HITS.jsonl --truth TRUTH.json --delay 1 [--json VERDICT.json]

What counts, per hostname as requested:
- politeness: two consecutive arrivals at one host closer than its required gap (the delay, or its
  Crawl-delay when longer) minus `tolerance`.  robots.txt requests count like any other.  An alias
  hostname (www.alias) is its own host here: the crawler keys its politeness slots on the hostname,
  so two names are two hosts to it (and to DNS); the web serving both is the one that sees their sum.
- retry_after: a request to a host before the Retry-After of an earlier 429/503 there has run out
  (host-wide, as the crawler holds the host's slot).
- robots: a fetch before any robots.txt request to that host; a fetch robots.txt disallows; any
  fetch from a host whose robots.txt answers 5xx/429 or never answers.  Those answer that way every
  time they are asked, so no robots retry time ever lifts the disallow during a run.
- coverage: reachable allowed pages (truth) answered 2xx at least once, under any alias or session id.
- duplicate_fetches: 2xx answers beyond the first for one canonical page (aliases and session ids folded).
- trap_pages_fetched: distinct calendar months fetched beyond the first.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from itertools import pairwise

from localweb.hits import Hit
from localweb.hostile.truth import Truth
from localweb.politeness_web import load_hits

KINDS = ("politeness", "retry_after", "robots")


@dataclass(frozen=True)
class Violation:
    kind: str       # politeness | retry_after | robots
    host: str
    target: str
    at_s: float     # seconds after the log's first request
    detail: str


@dataclass
class Verdict:
    summary: dict
    violations: list[Violation]

    def count(self, kind: str) -> int:
        return sum(v.kind == kind for v in self.violations)

    def report(self, examples: int = 5) -> str:
        s = self.summary
        cov = s["coverage"]
        lines = [f"requests: {s['requests']} to {len(s['per_host'])} hosts over {s['span_s']:.1f} s "
                 f"(delay {s['delay_s']:g} s, tolerance {s['tolerance_s']:g} s)",
                 "violations: " + ", ".join(f"{k} {s['violations'][k]}" for k in KINDS),
                 f"coverage: {cov['fetched']}/{cov['reachable']} reachable allowed pages = {cov['fraction']:.1%}",
                 f"duplicate fetches: {s['duplicate_fetches']}   trap pages fetched: {s['trap_pages_fetched']}   "
                 f"requests to unknown hosts: {s['unknown_host_requests']}", "",
                 f"{'host':<34}{'req':>5}{'robots':>7}{'pages':>11}{'min gap':>9}{'need':>6}{'pol':>5}{'r-a':>5}"
                 f"{'rob':>5}{'dup':>5}  statuses"]
        for host, h in sorted(s["per_host"].items()):
            gap = f"{h['min_gap_s']:.2f}" if h["min_gap_s"] is not None else "-"
            statuses = " ".join(f"{code}:{n}" for code, n in sorted(h["by_status"].items()))
            lines.append(f"{host:<34}{h['requests']:>5}{h['robots_requests']:>7}{h['pages']:>5}/{h['reachable']:<5}"
                         f"{gap:>9}{h['required_gap_s']:>6g}{h['politeness']:>5}{h['retry_after']:>5}{h['robots']:>5}"
                         f"{h['duplicates']:>5}  {statuses}")
        for kind in KINDS:
            found = [v for v in self.violations if v.kind == kind]
            if found:
                lines += ["", f"{kind} violations ({len(found)}), first {min(examples, len(found))}:"]
                lines += [f"  {v.at_s:8.2f} s  {v.host}{v.target}: {v.detail}" for v in found[:examples]]
        return "\n".join(lines)


def judge(hits: list[Hit], truth: Truth, delay: float, tolerance: float = 0.05) -> Verdict:
    hits = sorted(hits, key=lambda h: h.at)
    start = hits[0].at if hits else 0.0
    violations: list[Violation] = []
    by_host: dict[str, list[Hit]] = defaultdict(list)
    for hit in hits:
        by_host[hit.host].append(hit)

    def flag(kind: str, hit: Hit, detail: str) -> None:
        violations.append(Violation(kind, hit.host, hit.target, round(hit.at - start, 3), detail))

    ok_answers: Counter = Counter()     # canonical (host, target) -> 2xx answers
    per_host: dict[str, dict] = {}
    unknown = 0
    for host, log in by_host.items():
        known = truth.hosts.get(host)
        if known is None:
            unknown += len(log)
            continue
        required = known.required_gap(delay)
        gaps = [b.at - a.at for a, b in pairwise(log)]
        for (a, b), gap in zip(pairwise(log), gaps):
            if gap < required - tolerance:
                flag("politeness", b, f"{gap:.3f} s after the previous request ({a.target}); needs {required:g} s")
        hold_until, robots_asked = float("-inf"), False
        for hit in log:
            if hit.at < hold_until - tolerance:
                flag("retry_after", hit, f"{hold_until - hit.at:.2f} s before the Retry-After ran out")
            if hit.status in (429, 503) and known.retry_after_s:
                hold_until = max(hold_until, hit.at + known.retry_after_s)
            if hit.target in known.robots_paths:
                robots_asked = True
                continue
            if not robots_asked:
                flag("robots", hit, "fetched before robots.txt was asked")
            elif not known.allowed(hit.target):
                flag("robots", hit, "robots.txt failed (5xx/429/no answer): the host is disallowed (RFC 9309 §2.3.1.4)"
                     if known.robots_outcome == "disallow_all" else "disallowed by robots.txt")
            if 200 <= hit.status < 300:
                ok_answers[truth.canonical(host, hit.target)] += 1
        per_host[host] = {"requests": len(log), "robots_requests": sum(h.target in known.robots_paths for h in log),
                          "by_status": dict(Counter(h.status for h in log)),
                          "min_gap_s": round(min(gaps), 3) if gaps else None, "required_gap_s": required,
                          "behaviour": known.behaviour}

    reachable = truth.reachable()
    covered = reachable & set(ok_answers)
    dup_by_host = Counter()
    for (host, _), n in ok_answers.items():
        dup_by_host[host] += n - 1
    traps = {(h, t) for h, t in ok_answers if truth.hosts[h].trap_prefix and t.startswith(truth.hosts[h].trap_prefix)
             and t != truth.hosts[h].trap_start}
    for host, row in per_host.items():
        home = truth.hosts[host].alias_of or host
        row["pages"] = sum(1 for h, _ in covered if h == host) if home == host else 0
        row["reachable"] = len(truth.hosts[host].pages)
        row["duplicates"] = dup_by_host[host] if home == host else 0
        for kind in KINDS:
            row[kind] = sum(v.kind == kind and v.host == host for v in violations)
    summary = {
        "requests": len(hits), "span_s": round(hits[-1].at - start, 3) if hits else 0.0,
        "delay_s": delay, "tolerance_s": tolerance,
        "violations": {kind: sum(v.kind == kind for v in violations) for kind in KINDS},
        "coverage": {"fetched": len(covered), "reachable": len(reachable),
                     "fraction": len(covered) / len(reachable) if reachable else 1.0},
        "duplicate_fetches": sum(dup_by_host.values()), "trap_pages_fetched": len(traps),
        "unknown_host_requests": unknown, "per_host": per_host,
    }
    violations.sort(key=lambda v: v.at_s)
    return Verdict(summary, violations)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localweb.judge", description=__doc__.splitlines()[0])
    parser.add_argument("--hits", required=True, help="request log (JSON lines) from politeness_web serve --hits-out")
    parser.add_argument("--truth", required=True, help="truth JSON from python -m localweb.politeness_web truth")
    parser.add_argument("--delay", type=float, required=True, help="the crawl's download delay in seconds")
    parser.add_argument("--tolerance", type=float, default=0.05, help="clock slack on every gap (s)")
    parser.add_argument("--json", help="also write the summary and every violation here")
    args = parser.parse_args(argv)
    verdict = judge(load_hits(args.hits), Truth.load(args.truth), args.delay, args.tolerance)
    print(verdict.report())
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"summary": verdict.summary, "violations": [asdict(v) for v in verdict.violations]}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

