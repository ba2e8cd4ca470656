"""Per-host politeness: one request at a time per host, at least `download_delay_s` apart,
while different hosts are fetched in parallel."""
from itertools import pairwise

from crawl_helpers import run_crawl
from localweb import LocalWeb, load_config

DELAY = 0.4


def test_requests_to_one_host_are_spaced_by_the_delay_and_hosts_run_in_parallel(tmp_path):
    with LocalWeb(load_config(["pages_per_host=4"])) as web:
        seeds = [s for s in web.seeds if "news." in s or "shop." in s or "wiki." in s]
        run = run_crawl(seeds, tmp_path, ["proxy=" + web.proxy_url, f"download_delay_s={DELAY}",
                                          "randomize_delay=false", "max_pages_per_host=12"])
        logs = {host: web.hits.log(host) for host in ("news.weblm.test", "shop.weblm.test", "wiki.weblm.test")}
    assert run.returncode == 0, run.log[-2000:]
    for host, hits in logs.items():
        assert len(hits) >= 6, f"{host}: only {len(hits)} requests"
        gaps = [b.at - a.at for a, b in pairwise(hits)]
        # Scrapy spaces the *starts* of requests in one download slot by the delay (5% clock slack)
        assert min(gaps) >= DELAY * 0.95, f"{host}: requests {min(gaps):.3f} s apart, delay is {DELAY} s"
    # three hosts at one request per DELAY each: together they finish far sooner than one after another
    starts = sorted(hit.at for hits in logs.values() for hit in hits)
    total = sum(len(h) for h in logs.values())
    assert starts[-1] - starts[0] < (total - 1) * DELAY * 0.7
