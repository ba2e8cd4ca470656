"""Extraction in a killable child process: same results as in-process, runaway and crashing pages
become counted skips, and the next page still extracts."""
import dataclasses
import gzip
import logging
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import PAGES
from extraction_hooks import CRASH, HANG
from jobs.config import load_jobs_config
from jobs.extract import extract_batches
from jobs.text.main_text import Extracted, extract_document
from jobs.text.sandbox import ExtractionSandbox

CFG = load_jobs_config().extract
HOOK = "extraction_hooks:extract_or_misbehave"
REAL_PAGES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "extraction" / "trafilatura_eval" / "eval"


def real_page() -> bytes:
    """A real web page when the shared data is there, else the fixture article (still real trafilatura)."""
    found = sorted(REAL_PAGES.glob("*.html.gz"))[:1]
    return gzip.decompress(found[0].read_bytes()) if found else PAGES[0].body


def test_sandbox_returns_what_the_in_process_function_returns():
    page = real_page()
    with ExtractionSandbox(CFG) as sandbox:
        got = [sandbox.extract(page, 200, "text/html", None, "http://real.test/"),
               sandbox.extract(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url),
               sandbox.extract(b"", 200, "text/html", None, "http://empty.test/")]
        assert sandbox.starts == 1  # one child for the whole sequence
    assert isinstance(got[0], Extracted) and got[0] == extract_document(page, 200, "text/html", None,
                                                                        "http://real.test/", CFG)
    assert got[1] == extract_document(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url, CFG)
    assert got[2] == "empty_page"


def test_a_hanging_page_times_out_and_the_next_page_extracts(caplog):
    with ExtractionSandbox(CFG, HOOK, timeout_s=1.0) as sandbox:
        sandbox.extract(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url)  # child up before timing
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="weblm.jobs.extract"):
            assert sandbox.extract(HANG, 200, "text/html", None, "http://hang.test/page") == "extract_timeout"
        assert 1.0 <= time.monotonic() - began < 10.0   # the timeout fired: not the page's endless run
        assert "http://hang.test/page" in caplog.text
        after = sandbox.extract(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url)
        assert isinstance(after, Extracted) and after.title == "Otters of the river"
        assert sandbox.starts == 2


def test_a_crashing_child_is_counted_and_restarted(caplog):
    with ExtractionSandbox(CFG, HOOK, timeout_s=60.0) as sandbox:
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="weblm.jobs.extract"):
            assert sandbox.extract(CRASH, 200, "text/html", None, "http://crash.test/") == "extractor_crashed"
        assert time.monotonic() - began < 30.0  # noticed when the child died, not after the 60 s timeout
        assert "http://crash.test/" in caplog.text and "139" in caplog.text
        assert isinstance(sandbox.extract(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url), Extracted)
        assert sandbox.starts == 2


def bronze_batch(bodies: list[bytes]) -> pd.DataFrame:
    n = len(bodies)
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "url": [f"http://x.test/{i}" for i in range(n)],
                         "host": ["x.test"] * n, "fetch_time": [pd.Timestamp("2025-01-01")] * n,
                         "status": [200] * n, "content_type": ["text/html"] * n, "charset": [None] * n,
                         "headers": [None] * n, "html": bodies, "warc_file": ["f.warc.gz"] * n, "warc_offset": list(range(n))})


def test_the_partition_body_skips_bad_pages_with_reasons_and_keeps_the_rest():
    cfg = dataclasses.replace(CFG, timeout_s=1.0)
    batch = bronze_batch([PAGES[0].body, HANG, PAGES[1].body, CRASH, PAGES[6].body])
    out = pd.concat(extract_batches(iter([batch]), cfg, HOOK))
    assert out["skip_reason"].tolist() == [None, "extract_timeout", None, "extractor_crashed", None]
    assert out["title"].tolist()[::2] == ["Otters of the river", "Sea otters", "Beaver dams"]


def test_sandbox_off_extracts_in_process():
    cfg = dataclasses.replace(CFG, sandbox=False)
    out = pd.concat(extract_batches(iter([bronze_batch([PAGES[0].body, b""])]), cfg))
    assert out["skip_reason"].tolist() == [None, "empty_page"] and out["title"][0] == "Otters of the river"


def test_through_spark_a_hanging_page_is_skipped_and_the_task_finishes(spark):
    """The sandbox spawned from a pyspark worker (not the test process): the real deployment."""
    from jobs.extract import output_schema

    spark.sparkContext.addPyFile(str(Path(__file__).with_name("extraction_hooks.py")))  # the child imports it
    cfg = dataclasses.replace(CFG, timeout_s=2.0)
    bronze = spark.createDataFrame(bronze_batch([PAGES[0].body, HANG, PAGES[6].body, CRASH])).coalesce(1)
    rows = bronze.mapInPandas(lambda batches: extract_batches(batches, cfg, HOOK), output_schema()).collect()
    assert [(r["url"], r["skip_reason"], r["title"]) for r in rows] == [
        ("http://x.test/0", None, "Otters of the river"), ("http://x.test/1", "extract_timeout", None),
        ("http://x.test/2", None, "Beaver dams"), ("http://x.test/3", "extractor_crashed", None)]


def test_a_child_whose_parent_died_leaves_instead_of_spinning(tmp_path):
    """A Spark task killed hard cannot kill its sandbox child; the child must notice and exit."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys\n"
        "from jobs.config import load_jobs_config\n"
        "from jobs.text.sandbox import ExtractionSandbox\n"
        "from extraction_hooks import HANG\n"
        "if __name__ == '__main__':\n"
        "    sandbox = ExtractionSandbox(load_jobs_config().extract, 'extraction_hooks:extract_or_misbehave', 600)\n"
        "    sandbox._start()\n"
        "    print(sandbox._process.pid, flush=True)\n"
        "    sandbox.extract(HANG, 200, 'text/html', None, 'http://hang.test/')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), str(Path(__file__).parent)])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    child_pid = int(parent.stdout.readline())
    time.sleep(0.5)  # the child is now inside the hanging page
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while running(child_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = running(child_pid)
    if alive:
        os.kill(child_pid, signal.SIGKILL)
    assert not alive, "the sandbox child outlived its killed parent by 10 s"


def running(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(") ", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_child_that_never_starts_fails_with_the_setting_to_change():
    cfg = dataclasses.replace(CFG, start_timeout_s=1.0)
    began = time.monotonic()
    with ExtractionSandbox(cfg, "slow_start_hook:extract") as sandbox:
        with pytest.raises(RuntimeError, match=r"did not start within 1 s .*extract.start_timeout_s"):
            sandbox.extract(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url)
    assert time.monotonic() - began < 15.0  # gave up at the start timeout, not after the child's 30 s import
