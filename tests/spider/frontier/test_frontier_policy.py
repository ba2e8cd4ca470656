"""The frontier's pure policies: canonical URLs, admission and trap rules, politeness arithmetic, robots records."""
from __future__ import annotations

import random

from spider.config import load_crawl_config
from spider.frontier import robots
from spider.frontier.admission import Admission, SsrfGuard
from spider.frontier.backend import HostState
from spider.frontier.bloom import BloomLayout, line_fp_rate
from spider.frontier.canonical import Canonicalizer, jump_hash
from spider.frontier.politeness import after_fetch, politeness_key, with_crawl_delay

CFG = load_crawl_config(["download_delay_s=1", "randomize_delay=true", "frontier.delay_jitter=0.5",
                         "max_crawl_delay_s=30", "frontier.max_backoff_s=60"])


def test_session_and_tracking_parameters_collapse_copies_into_one_url():
    c = Canonicalizer(CFG.frontier.strip_params)
    ids = {c.id(u) for u in ["http://a.test/p?id=3", "http://a.test/p?sid=77&id=3", "http://a.test/p?id=3&utm_source=x",
                             "http://a.test/p;jsessionid=ABC?id=3", "http://A.test/p?id=3#top"]}
    assert len(ids) == 1
    assert c.strip("http://a.test/p?sid=77&id=3&utm_medium=y") == "http://a.test/p?id=3"
    assert c.id("http://a.test/p?id=4") not in ids  # a real parameter still counts


def test_a_default_port_makes_no_other_url_and_another_port_does():
    c = Canonicalizer([])
    assert c.id("http://a.test:80/p") == c.id("http://a.test/p") == c.id("HTTP://A.test:80/p#x")
    assert c.id("https://a.test:443/p") == c.id("https://a.test/p") != c.id("http://a.test/p")
    assert c.id("http://[::1]:80/p") == c.id("http://[::1]/p") and c.id("http://u:p@a.test:80/") == c.id(
        "http://u:p@a.test/")
    assert len({c.id("http://a.test:8080/p"), c.id("http://a.test:443/p"), c.id("https://a.test:80/p"),
                c.id("http://a.test/p")}) == 4
    admission = Admission(CFG, {"a.test"})
    assert [admission.reason(u, 0) for u in ("http://a.test:99999/p", "http://a.test:abc/p", "http://[::1/p",
                                             "http://a.test:80/p")] == ["malformed", "malformed", "malformed", None]


def test_jump_hash_is_consistent_when_partitions_grow():
    keys = range(2000)
    before = [jump_hash(k, 16) for k in keys]
    after = [jump_hash(k, 17) for k in keys]
    moved = sum(a != b for a, b in zip(before, after))
    assert all(b == 16 for a, b in zip(before, after) if a != b)  # a key moves only into the new partition
    assert 0.03 < moved / len(keys) < 0.1  # about 1/17 of them


def test_admission_refuses_before_the_bloom_filter_sees_the_url():
    a = Admission(load_crawl_config(["depth_limit=3"]), {"a.test"}, this_year=2026)
    assert a.reason("http://a.test/x", 3) is None
    assert a.reason("http://a.test/x", 4) == "depth"
    assert a.knows("a.test") and not a.knows("b.test")  # b.test: the backend checks the cluster's scope
    assert a.reason("ftp://a.test/x", 0) == "scheme"
    assert a.reason("http://a.test/" + "x" * 3000, 0) == "url_too_long"
    assert a.reason("http://a.test/a/b/a/b/a/b", 0) == "repeated_path_segment"
    assert a.reason("http://a.test/calendar/2031/05", 0) == "calendar_trap"     # more than a year ahead
    assert a.reason("http://a.test/calendar/1850-01/", 0) == "calendar_trap"
    assert a.reason("http://a.test/news/2024/05/12/story.html", 0) is None       # dated news is fine
    assert a.reason("http://a.test/item/123456", 0) is None                      # numbers are not dates


def test_the_ssrf_guard_refuses_private_targets_unless_allowed():
    a = Admission(CFG, {"127.0.0.1", "169.254.169.254", "10.1.2.3", "93.184.216.34"})
    assert a.reason("http://169.254.169.254/latest/meta-data/", 0) == "ssrf_private_address"
    assert a.reason("http://10.1.2.3/", 0) == "ssrf_private_address"
    assert a.reason("http://127.0.0.1/", 0) == "ssrf_private_address"
    assert a.reason("http://93.184.216.34/", 0) is None
    guard = SsrfGuard(["127.0.0.1", "10.0.0.0/8"])
    assert not guard.refused("127.0.0.1") and not guard.refused("10.9.9.9") and guard.refused("192.168.1.1")


def test_jitter_only_lengthens_a_gap():
    rng = random.Random(1)
    gaps = [after_fetch(CFG, HostState(), 100.0, failed=False, rng=rng)[0] - 100.0 for _ in range(2000)]
    assert min(gaps) >= 1.0 and max(gaps) <= 1.5
    assert max(gaps) - min(gaps) > 0.4  # it does jitter


def test_errors_back_off_exponentially_up_to_the_cap_and_a_success_resets():
    cfg = load_crawl_config(["download_delay_s=1", "randomize_delay=false", "frontier.max_backoff_s=10"])
    state, gaps = HostState(), []
    for _ in range(6):
        next_at, state = after_fetch(cfg, state, 0.0, failed=True)
        gaps.append(next_at)
    assert gaps == [1, 2, 4, 8, 10, 10] and state.errors == 6
    next_at, state = after_fetch(cfg, state, 0.0, failed=False)
    assert next_at == 1 and state.errors == 0


def test_retry_after_blocks_the_host_and_crawl_delay_is_capped():
    cfg = load_crawl_config(["download_delay_s=1", "randomize_delay=false", "max_crawl_delay_s=5"])
    next_at, state = after_fetch(cfg, HostState(), 0.0, failed=True, blocked_until=120.0)
    assert next_at == 120.0 and state.blocked_until == 120.0
    assert with_crawl_delay(cfg, HostState(), 2.5).delay_s == 2.5
    assert with_crawl_delay(cfg, HostState(), 1000).delay_s == 5
    assert with_crawl_delay(cfg, HostState(), 0.5).delay_s == -1  # below the configured delay: ours applies
    assert after_fetch(cfg, with_crawl_delay(cfg, HostState(), 2.5), 0.0, failed=False)[0] == 2.5


def test_politeness_keys():
    assert politeness_key("http://News.Example.org/a", "host") == "news.example.org"
    assert politeness_key("http://a.b.example.org/a", "domain") == "example.org"
    assert politeness_key("http://www.bbc.co.uk/a", "domain") == "bbc.co.uk"
    assert politeness_key("http://10.0.0.1:8080/a", "domain") == "10.0.0.1"
    assert politeness_key("http://[2001:db8::1]/a", "domain") == "2001:db8::1"
    # by the Public Suffix List: a short second level that is no suffix, a three-label suffix, a longer chain
    assert politeness_key("http://docs.bit.ly/a", "domain") == "bit.ly"
    assert politeness_key("http://www.city.kawasaki.jp/a", "domain") == "city.kawasaki.jp"
    assert politeness_key("http://a.b.shop.example.com.au/a", "domain") == "example.com.au"
    # under no listed suffix (the local web's .test hosts, an intranet name): the last two labels, or the one
    assert politeness_key("http://news.weblm.test/a", "domain") == "weblm.test"
    assert politeness_key("http://intranet/a", "domain") == "intranet"


def test_robots_records_follow_rfc_9309():
    assert robots.from_answer(200, b"User-agent: *\nDisallow: /x", 0, 86400, 600, 500).status == "parsed"
    assert robots.from_answer(200, b"a" * 1000, 0, 86400, 600, 500).body == b"a" * 500
    assert robots.from_answer(404, b"", 0, 86400, 600, 500).status == "allow_all"
    for status in (429, 500, 503):
        record = robots.from_answer(status, b"", 0, 86400, 600, 500)
        assert (record.status, record.expires) == ("disallow_all", 600)
    assert robots.from_error("timeout", 0, 86400, 600).status == "disallow_all"
    assert robots.from_error("redirect_limit", 0, 86400, 600).status == "allow_all"
    rules = robots.parse(robots.from_answer(200, b"User-agent: *\nDisallow: /private\nCrawl-delay: 3\n", 0, 1, 1, 10**6))
    assert not rules.allowed("http://a/private/x", "weblm") and rules.allowed("http://a/public", "weblm")
    assert rules.crawl_delay("weblm") == 3


def test_bloom_layout_meets_its_bound_in_every_stage_and_small_crawls_stay_small():
    layout = BloomLayout(capacity=10_000_000, fp_rate=1e-6)
    assert layout.stages[0].bytes < 40 * 2 ** 20   # 10 M URLs at 1e-6 in under 40 MiB
    assert sum(s.fp_rate for s in layout.stages) < 1e-6
    for stage in layout.stages:  # its lines' uneven load included: each stage is sized to hold its share when full
        assert stage.lines == 63 and stage.line_bits == 8320
        assert line_fp_rate(stage.blocks * stage.block_bits / stage.capacity, stage.line_bits, stage.k) <= stage.fp_rate
    assert line_fp_rate(30.0, 8320, 21) > line_fp_rate(30.0, 10**9, 21)  # lines cost bits for the same rate
    assert layout.stage_for(0) == 0 and layout.stage_for(10_000_000) == 1
    default = BloomLayout(capacity=CFG.frontier.bloom_capacity // CFG.frontier.partitions, fp_rate=1e-6)
    assert default.stages[0].bytes < 4 * 2 ** 20   # what a laptop crawl allocates per partition at most
