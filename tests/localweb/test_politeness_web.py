"""The adversarial web and its judge: each host does what its behaviour line says, the truth's BFS
agrees with a crawl over HTTP, and the judge counts violations and coverage as documented."""
from __future__ import annotations

import gzip
import re
import socket
import time
import zlib
from collections import deque
from html import unescape
from http.client import IncompleteRead

import pytest
from protego import Protego

from localweb.hits import Hit
from localweb.hostile import HostTruth, Truth, hostile_config
from localweb.hostile.pages import canonical_target
from localweb.judge import judge
from localweb.politeness_web import PolitenessWeb, dump_hits, load_hits

from localweb_client import fetch

# Small and quick: few pages, short waits, small bombs; still every behaviour.
SMALL = ["pages_per_site=6", "small_site_pages=4", "slow_pages=3", "slow_seconds=0.3", "hang_seconds=3",
         "retry_after_s=1", "refusals=2", "limited_pages=1", "session_pages=4", "bomb_bytes=3000000",
         "enormous_bytes=300000", "binary_bytes=1000"]
D = "hostile.weblm.test"


@pytest.fixture(scope="module")
def hostile():
    with PolitenessWeb(hostile_config(SMALL)) as running:
        yield running


def url(name: str, target: str = "/") -> str:
    return f"http://{name}.{D}{target}"


def hrefs(body: bytes) -> list[str]:
    return [unescape(h) for h in re.findall(r'href="([^"]+)"', body.decode("utf-8", "replace"))]


# ---- the web, host by host -----------------------------------------------------------------------
def test_twenty_six_hosts_each_seeded_by_its_home_page(hostile):
    assert len(hostile.hosts) == 26 and len(hostile.seeds) == 26
    assert all(seed == f"http://{host}/" for seed, host in zip(hostile.seeds, hostile.hosts))


@pytest.mark.parametrize("name, status", [("robots-500", 500), ("robots-503", 503), ("robots-429", 429),
                                          ("docs", 404), ("news", 200), ("robots-garbage", 200)])
def test_robots_txt_answers_its_status(hostile, name, status):
    assert fetch(hostile, url(name, "/robots.txt"))[0] == status
    outcome = hostile.truth.hosts[f"{name}.{D}"].robots_outcome
    assert outcome == {500: "disallow_all", 503: "disallow_all", 429: "disallow_all", 404: "none"}.get(
        status, "none" if name == "robots-garbage" else "rules")


def test_garbage_robots_txt_holds_no_rules(hostile):
    _, _, body = fetch(hostile, url("robots-garbage", "/robots.txt"))
    assert Protego.parse(body.decode("latin-1")).can_fetch(url("robots-garbage", "/section/1/"), "weblm-spider")


def test_hanging_robots_txt_never_answers(hostile):
    with pytest.raises((socket.timeout, TimeoutError)):
        fetch(hostile, url("robots-hang", "/robots.txt"), timeout=0.5)


def test_robots_txt_redirect_chain_ends_in_rules_and_the_loop_never_ends(hostile):
    status, headers, _ = fetch(hostile, url("robots-chain", "/robots.txt"))
    assert status == 301 and headers["location"] == url("robots-chain", "/robots-moved.txt")
    status, headers, _ = fetch(hostile, headers["location"])
    assert status == 302 and headers["location"] == url("robots-chain", "/robots-final.txt")
    status, _, body = fetch(hostile, headers["location"])
    assert status == 200 and b"Disallow: /private/" in body
    seen = [url("robots-loop", "/robots.txt")]
    for _ in range(4):
        status, headers, _ = fetch(hostile, seen[-1])
        assert status == 301
        seen.append(headers["location"])
    assert seen[0] == seen[2] == seen[4] != seen[1]


def test_huge_robots_txt_puts_its_rule_inside_the_first_500_kib(hostile):
    _, _, body = fetch(hostile, url("robots-huge", "/robots.txt"))
    assert len(body) > 500 * 1024
    assert 400_000 < body.index(b"Disallow: /private/") < 500 * 1024
    assert not Protego.parse(body.decode()).can_fetch(url("robots-huge", "/private/0.html"), "weblm-spider")


def test_crawl_delay_and_the_weblm_spider_group(hostile):
    assert b"Crawl-delay: 2" in fetch(hostile, url("crawl-delay", "/robots.txt"))[2]
    assert hostile.truth.hosts[f"crawl-delay.{D}"].required_gap(1.0) == 2.0
    wiki = hostile.truth.hosts[f"wiki.{D}"]
    assert wiki.allowed("/section/1/") and not wiki.allowed("/private/0.html")


@pytest.mark.parametrize("name, status", [("rate-limited", 429), ("unavailable", 503)])
def test_limited_pages_refuse_with_retry_after_then_answer(hostile, name, status):
    limited = url(name, "/section/1/")
    for _ in range(2):
        code, headers, _ = fetch(hostile, limited)
        assert code == status and headers["retry-after"] == "1"
    assert fetch(hostile, limited)[0] == 200
    assert fetch(hostile, url(name, "/section/2/"))[0] == 200   # only limited_pages=1 page is limited


def test_slow_host_answers_late(hostile):
    started = time.monotonic()
    assert fetch(hostile, url("slow", "/"))[0] == 200
    assert time.monotonic() - started >= 0.3


def test_session_links_carry_fresh_ids_that_fold_to_one_page(hostile):
    first, second = hrefs(fetch(hostile, url("session"))[2]), hrefs(fetch(hostile, url("session"))[2])
    decorated = [h for h in first if h.startswith("http")]
    assert decorated and all(re.search(r"[?;](sid|jsessionid|utm_source)=", h) for h in decorated[1:])
    assert set(first) != set(second)   # new ids on every view
    assert {canonical_target(h.split(D, 1)[1]) for h in decorated} == {canonical_target(h.split(D, 1)[1])
                                                                         for h in second if h.startswith("http")}
    target = decorated[1].split(D, 1)[1]
    assert fetch(hostile, url("session", target))[0] == 200
    assert canonical_target("/a/;jsessionid=AB12?utm_source=x&id=3&sid=9") == "/a/?id=3"


def test_alias_hosts_serve_the_same_pages_with_relative_links(hostile):
    a, b = fetch(hostile, url("alias"))[2], fetch(hostile, url("www.alias"))[2]
    assert a == b and all(not h.startswith("http") for h in hrefs(a))
    assert hostile.truth.canonical(f"www.alias.{D}", "/section/1/?sid=1") == (f"alias.{D}", "/section/1/")


def test_broken_answers(hostile):
    with pytest.raises(IncompleteRead):
        fetch(hostile, url("broken", "/broken/truncated.html"))
    status, headers, body = fetch(hostile, url("broken", "/broken/bad-gzip.html"))
    assert status == 200 and headers["content-encoding"] == "gzip"
    with pytest.raises((zlib.error, OSError, EOFError)):
        gzip.decompress(body)
    _, _, bomb = fetch(hostile, url("broken", "/broken/bomb.html"))
    assert len(bomb) < 20_000 and len(gzip.decompress(bomb)) == 3_000_000
    _, headers, body = fetch(hostile, url("broken", "/broken/file.bin"))
    assert headers["content-type"] == "application/octet-stream" and len(body) == 1000
    assert abs(len(fetch(hostile, url("broken", "/broken/enormous.html"))[2]) - 300_000) < 1000


def test_calendar_trap_never_ends(hostile):
    start = hostile.truth.hosts[f"calendar.{D}"].trap_start
    assert url("calendar", start) in hrefs(fetch(hostile, url("calendar"))[2])
    links = hrefs(fetch(hostile, url("calendar", "/calendar/2999/12"))[2])
    assert url("calendar", "/calendar/3000/01") in links and url("calendar", "/calendar/2999/11") in links


def test_redirect_chain_and_loop_pages(hostile):
    status, headers, _ = fetch(hostile, url("redirects", "/old/1"))
    assert status == 301 and fetch(hostile, headers["location"])[0] == 302
    assert fetch(hostile, url("redirects", "/moved/1.html"))[0] == 200
    assert fetch(hostile, url("redirects", "/loop/a"))[1]["location"] == url("redirects", "/loop/b")


def test_truth_matches_a_breadth_first_crawl_over_http(hostile):
    """An independent BFS through the proxy: robots.txt read from its status, links parsed from HTML."""
    truth, found = hostile.truth, set()
    for seed in hostile.seeds:
        host = seed.split("/")[2]
        home = truth.hosts[host].alias_of or host
        allowed = robots_over_http(hostile, host)
        queue, seen = deque(["/"]), {"/"}
        while queue:
            target = queue.popleft()
            if not allowed(target):
                continue
            status, headers, body = fetch_retrying(hostile, f"http://{host}{target}")
            if 300 <= status < 400:
                links = [headers["location"]]
            elif status == 200:
                found.add((home, target))
                is_html = headers.get("content-type", "").startswith("text/html") and "content-encoding" not in headers
                links = [] if target.startswith("/calendar/") or not is_html else hrefs(body)
            else:
                continue
            for link in links:
                if link.startswith("http://"):
                    if link.split("/")[2] != host:
                        continue
                    link = "/" + link.split("/", 3)[3]
                link = canonical_target(link)
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
    assert found == truth.reachable()
    assert len(truth) == len(found) > 100


def robots_over_http(web, host: str):
    target = f"http://{host}/robots.txt"
    for _ in range(5):   # RFC 9309 §2.3.1.2: follow five redirects, then call it unavailable
        try:
            status, headers, body = fetch(web, target, timeout=0.5)
        except (socket.timeout, TimeoutError):
            return lambda t: False
        if status not in (301, 302):
            break
        target = headers["location"]
    else:
        return lambda t: True
    if status >= 500 or status == 429:
        return lambda t: False
    if status >= 400:
        return lambda t: True
    rules = Protego.parse(body.decode("utf-8", "replace"))
    return lambda t: rules.can_fetch(f"http://{host}{t}", "weblm-spider")


def fetch_retrying(web, link: str):
    for _ in range(4):
        try:
            status, headers, body = fetch(web, link)
        except IncompleteRead:
            return 200, {}, b""   # the truncated page: answered, body cut short
        if status not in (429, 503):
            return status, headers, body
    return status, headers, body


# ---- the judge on hand-made logs -----------------------------------------------------------------
def host_truth(host: str, pages=("/", "/a", "/b"), robots="User-agent: *\nDisallow: /private/\n", outcome="rules",
               **fields) -> HostTruth:
    base = dict(behaviour="test", robots_outcome=outcome, robots_text=robots, robots_paths=("/robots.txt",),
                crawl_delay=None, retry_after_s=None, alias_of=None, pages=tuple(pages), disallowed=(),
                trap_prefix=None, trap_start=None)
    return HostTruth(host=host, **{**base, **fields})


def small_truth() -> Truth:
    return Truth({"a.test": host_truth("a.test"),
                  "slowly.test": host_truth("slowly.test", crawl_delay=2.0),
                  "busy.test": host_truth("busy.test", retry_after_s=5.0),
                  "down.test": host_truth("down.test", pages=(), robots=None, outcome="disallow_all"),
                  "www.a.test": host_truth("www.a.test", pages=(), alias_of="a.test"),
                  "cal.test": host_truth("cal.test", pages=("/", "/cal/1"), trap_prefix="/cal/", trap_start="/cal/1")},
                 seeds=[])


def hits(*rows) -> list[Hit]:
    return [Hit(at, "GET", host, target, status) for at, host, target, status in rows]


def test_a_gap_below_the_delay_is_a_violation_and_an_exact_gap_is_not():
    verdict = judge(hits((0.0, "a.test", "/robots.txt", 200), (1.0, "a.test", "/", 200),
                         (1.5, "a.test", "/a", 200), (2.5, "a.test", "/b", 200)), small_truth(), delay=1.0)
    assert verdict.count("politeness") == 1
    (v,) = verdict.violations
    assert (v.kind, v.target, v.at_s) == ("politeness", "/a", 1.5)
    assert verdict.summary["per_host"]["a.test"]["min_gap_s"] == 0.5


def test_robots_requests_count_and_tolerance_forgives_clock_slack():
    verdict = judge(hits((0.0, "a.test", "/robots.txt", 200), (0.3, "a.test", "/robots.txt", 200),
                         (1.26, "a.test", "/", 200)), small_truth(), delay=1.0, tolerance=0.05)
    assert [v.target for v in verdict.violations] == ["/robots.txt"]
    assert judge(hits((0.0, "a.test", "/robots.txt", 200), (0.96, "a.test", "/", 200)),
                 small_truth(), delay=1.0).count("politeness") == 0


def test_crawl_delay_raises_the_gap_and_alias_hosts_are_judged_apart():
    log = hits((0.0, "slowly.test", "/robots.txt", 200), (1.5, "slowly.test", "/", 200),
               (0.0, "a.test", "/robots.txt", 200), (0.1, "www.a.test", "/robots.txt", 200))
    verdict = judge(log, small_truth(), delay=1.0)
    assert [(v.kind, v.host) for v in verdict.violations] == [("politeness", "slowly.test")]


def test_retry_after_holds_the_whole_host():
    log = hits((0.0, "busy.test", "/robots.txt", 200), (1.0, "busy.test", "/a", 429),
               (3.0, "busy.test", "/b", 200), (6.0, "busy.test", "/a", 200))
    verdict = judge(log, small_truth(), delay=1.0)
    assert [(v.kind, v.target) for v in verdict.violations] == [("retry_after", "/b")]


def test_robots_violations():
    log = hits((0.0, "a.test", "/", 200),                       # before robots.txt was asked
               (1.0, "a.test", "/robots.txt", 200), (2.0, "a.test", "/private/x", 200),
               (0.0, "down.test", "/robots.txt", 503), (1.0, "down.test", "/robots.txt", 503),
               (2.0, "down.test", "/", 200))
    verdict = judge(log, small_truth(), delay=1.0)
    assert [(v.host, v.target) for v in verdict.violations if v.kind == "robots"] == [
        ("a.test", "/"), ("a.test", "/private/x"), ("down.test", "/")]
    assert verdict.count("politeness") == 0


def test_coverage_folds_aliases_and_session_ids_and_counts_duplicates_and_traps():
    log = hits((0.0, "a.test", "/robots.txt", 200), (1.0, "a.test", "/", 200), (2.0, "a.test", "/a?sid=1", 200),
               (3.0, "a.test", "/a;jsessionid=X", 200), (4.0, "a.test", "/b", 500),
               (0.0, "www.a.test", "/robots.txt", 200), (1.0, "www.a.test", "/?utm_source=x", 200),
               (0.0, "cal.test", "/robots.txt", 200), (1.0, "cal.test", "/", 200), (2.0, "cal.test", "/cal/1", 200),
               (3.0, "cal.test", "/cal/2", 200), (4.0, "cal.test", "/cal/3", 200), (5.0, "cal.test", "/cal/3", 200))
    s = judge(log, small_truth(), delay=1.0).summary
    # reachable: a.test / /a /b, slowly.test / /a /b, busy.test / /a /b, cal.test / /cal/1 = 11; fetched 2xx: 4
    assert s["coverage"] == {"fetched": 4, "reachable": 11, "fraction": 4 / 11}
    assert s["duplicate_fetches"] == 3   # "/" via the alias, /a twice, /cal/3 twice
    assert s["trap_pages_fetched"] == 2
    assert s["per_host"]["a.test"]["pages"] == 2 and s["per_host"]["a.test"]["duplicates"] == 2


def test_the_request_log_round_trips_and_the_report_reads(tmp_path, hostile):
    log = hits((0.0, f"news.{D}", "/robots.txt", 200), (0.2, f"news.{D}", "/private/0.html", 200),
               (1.0, "nowhere.test", "/", 502))
    dump_hits(log, tmp_path / "hits.jsonl")
    assert load_hits(tmp_path / "hits.jsonl") == log
    hostile.truth.dump(tmp_path / "truth.json")
    reloaded = Truth.load(tmp_path / "truth.json")
    assert reloaded.reachable() == hostile.truth.reachable()
    verdict = judge(load_hits(tmp_path / "hits.jsonl"), reloaded, delay=1.0)
    assert verdict.summary["violations"] == {"politeness": 1, "retry_after": 0, "robots": 1}
    assert verdict.summary["unknown_host_requests"] == 1
    report = verdict.report()
    assert "politeness 1" in report and f"news.{D}/private/0.html: disallowed by robots.txt" in report
