"""Fixtures for the Spark jobs: one local Spark session with real Delta, WARC files written with
warcio, and one pipeline run (ingest -> extract -> tokenize -> export) that the tests inspect."""
from __future__ import annotations

import gzip
import io
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

# ../shared/data beside the project root (CI lays a copy there too)
SHARED_WARC = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "warc"


def shared_warc(relative: str) -> str:
    path = SHARED_WARC / relative
    if not path.exists():
        pytest.skip(f"shared test data {path} is absent")
    return str(path)


# -- pages ---------------------------------------------------------------------------------------
NAV = "".join(f'<li><a href="/menu/{i}">Menu entry number {i}</a></li>' for i in range(25))
FOOTER = "Copyright 2025 Otter Press Ltd. All rights reserved. Privacy policy. Cookie settings. Imprint."


def article(title: str, topic: str, paragraphs: int = 6) -> str:
    body = "".join(f"<p>{topic} paragraph {i}: field notes describe how the animals live along the "
                   f"river banks, what they eat in each season and how the young learn to swim.</p>"
                   for i in range(paragraphs))
    return (f"<html><head><title>{title}</title></head><body><nav><ul>{NAV}</ul></nav>"
            f"<header><div class='promo'>Subscribe to the newsletter now! Login | Register</div></header>"
            f"<main><article><h1>{title}</h1>{body}</article></main><footer><p>{FOOTER}</p></footer></body></html>")


CP1252_TEXT = ("Le café “Chez Zoé” sert une crème brûlée célèbre – et l’œuvre du pâtissier "
               "étonne chaque année les critiques gastronomiques venus de très loin. ")


@dataclass(frozen=True)
class Page:
    url: str
    status: int
    content_type: str
    body: bytes
    encoding: str | None = None  # Content-Encoding
    truncated: str | None = None  # WARC-Truncated: the crawler cut the body
    headers: tuple = ()           # more HTTP headers, (name, value) pairs
    date: str | None = None       # its WARC-Date (when it was fetched); None: now


PAGES = [
    Page("http://otters.weblm.test/rivers", 200, "text/html; charset=utf-8",
         article("Otters of the river", "Otter").encode("utf-8")),
    Page("http://otters.weblm.test/sea", 200, "text/html; charset=utf-8",
         article("Sea otters", "Sea otter").encode("utf-8"), encoding="gzip"),
    Page("http://cafe.weblm.test/", 200, "text/html",  # undeclared in HTTP; <meta> says windows-1252
         ('<html><head><meta charset="windows-1252"><title>Chez Zoé</title></head><body><article>'
          + "".join(f"<p>{CP1252_TEXT}{i}</p>" for i in range(4)) + "</article></body></html>").encode("cp1252")),
    Page("http://empty.weblm.test/", 200, "text/html; charset=utf-8", b""),
    Page("http://otters.weblm.test/missing", 404, "text/html", b"<html><body>Not found</body></html>"),
    Page("http://otters.weblm.test/logo.png", 200, "image/png", b"\x89PNG\r\n\x1a\nnot-really"),
    Page("http://beavers.weblm.test/dams", 200, "text/html; charset=utf-8",
         article("Beaver dams", "Beaver", 8).encode("utf-8")),
]


def record_id(path: Path, index: int, page: Page, kind: str) -> str:
    """The same WARC-Record-ID in every run for the same file name and page (warcio would draw a random uuid4):
    doc_id is its hash, and the export's seeded shuffle orders by doc_id, so a test's order is the same each run."""
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{path.name}#{index}#{kind}#{page.url}')}>"


def write_warc(path: Path, pages: list[Page]) -> list[str]:
    """A WARC/1.1 file as the spider writes it (SEAMS §2); returns the response record ids."""
    ids = []
    with open(path, "wb") as out:
        writer = WARCWriter(out, gzip=True, warc_version="WARC/1.1")
        writer.write_record(writer.create_warcinfo_record(path.name, {"software": "weblm tests"}))
        for index, page in enumerate(pages):
            body = gzip.compress(page.body, mtime=0) if page.encoding == "gzip" else page.body
            headers = [("Content-Type", page.content_type), ("Content-Length", str(len(body)))]
            if page.encoding:
                headers.append(("Content-Encoding", page.encoding))
            headers += list(page.headers)
            reason = "OK" if page.status == 200 else "Not Found"
            http = StatusAndHeaders(f"{page.status} {reason}", headers, protocol="HTTP/1.1")
            warc_headers = {"WARC-Record-ID": record_id(path, index, page, "response")}
            if page.truncated:
                warc_headers["WARC-Truncated"] = page.truncated
            if page.date:
                warc_headers["WARC-Date"] = page.date
            response = writer.create_warc_record(page.url, "response", payload=io.BytesIO(body), http_headers=http,
                                                 warc_headers_dict=warc_headers)
            request = writer.create_warc_record(
                page.url, "request", payload=io.BytesIO(b""),
                warc_headers_dict={"WARC-Record-ID": record_id(path, index, page, "request")},
                http_headers=StatusAndHeaders(f"GET {page.url} HTTP/1.1", [("Host", "x")], is_http_request=True))
            request.rec_headers.add_header("WARC-Concurrent-To", response.rec_headers.get_header("WARC-Record-ID"))
            writer.write_record(request)
            writer.write_record(response)
            ids.append(response.rec_headers.get_header("WARC-Record-ID"))
    return ids


@dataclass(frozen=True)
class Crawl:
    warc_dir: Path
    good_file: Path
    good_ids: list
    cut_file: Path
    cut_ids_kept: list     # responses of the cut file that come before the cut


@pytest.fixture(scope="session")
def crawl(tmp_path_factory) -> Crawl:
    warc_dir = tmp_path_factory.mktemp("warc")
    good = warc_dir / "weblm-20250101000000-00000-1.warc.gz"
    good_ids = write_warc(good, PAGES)
    # a second file cut in the middle of its last response: the spider's disk filled up
    whole = warc_dir / "whole.tmp"
    more = [Page(f"http://more.weblm.test/{i}", 200, "text/html; charset=utf-8",
                 article(f"More otters {i}", f"Extra {i}").encode()) for i in range(3)]
    cut_ids = write_warc(whole, more)
    data = whole.read_bytes()
    whole.unlink()
    cut = warc_dir / "weblm-20250101000100-00001-1.warc.gz"
    cut.write_bytes(data[: len(data) - 300])
    # a file still being written must be ignored
    (warc_dir / "weblm-20250101000200-00002-1.warc.gz.open").write_bytes(data[:100])
    return Crawl(warc_dir, good, good_ids, cut, cut_ids[:2])


# -- Spark -----------------------------------------------------------------------------------------
# The tests' tables hold tens of rows: Spark runs their plans interpreted, as its own test suites can, instead of
# compiling Java for each (Janino took 20% of the driver's CPU in tests/jobs/test_export_job.py, measured with JFR;
# the file ran in 206 s against 254-265 s with code generation).  The jobs' results are the same either way.
# (conf/profiles/smoke.yaml does the same for the demo's end-to-end test; a real run keeps code generation.)
# The JVM keeps HotSpot's C2 compiler: this session lives for the whole run, and with C1 alone (`-XX:TieredStopAtLevel=1
# -XX:+UseSerialGC`, which the smoke profile's minute-long JVMs gain from) the jobs tests took 519 worker-seconds more
# in one CI run than at fb59101 the same day (test_quality_job 445 s against 270 s, test_export_job 318 s against
# 199 s); the spider and trainer tests took about the same, the smoke demo's end-to-end test 118 s less.
SMALL_DATA_SPARK = "--conf spark.sql.codegen.wholeStage=false --conf spark.sql.codegen.factoryMode=NO_CODEGEN"


@pytest.fixture(scope="session")
def spark():
    from conf.paths import load_paths
    from jobs.base import build_session
    from jobs.config import load_jobs_config

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # one session serves every job test of the run: the default 1 GiB driver heap ran out in CI ("not enough
    # memory to build and broadcast the table") after the dedup and quality tests
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-memory 3g {SMALL_DATA_SPARK} pyspark-shell")
    cfg = load_jobs_config(["spark.shuffle_partitions=2"])
    session, _ = build_session(cfg, load_paths(), "local[2]", "weblm-tests-jobs")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True, scope="module")
def _release_cached_tables():
    """After each test module, drop what it left persisted in the shared session (jobs unpersist on success,
    a failing test may not)."""
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.catalog.clearCache()


@dataclass
class Pipeline:
    root: Path
    lake: Path
    tokenizer_dir: Path
    shards_dir: Path
    metrics: dict

    def args(self, *extra: str) -> list[str]:
        return ["--lake", str(self.lake), "-p", f"tokenizer_dir={self.tokenizer_dir}",
                "-p", f"shards_dir={self.shards_dir}", "-o", "tokenize.vocab_size=400",
                "-o", "tokenize.input_table=silver.documents",  # these fixtures run tokenize/export alone, on extract's output
                "-o", "export.target_tokens_per_shard=400", *extra]


@pytest.fixture(scope="session")
def pipeline(spark, crawl, tmp_path_factory) -> Pipeline:
    """The four jobs once, in order, on the fixture crawl."""
    from jobs.export import ExportJob
    from jobs.extract import ExtractJob
    from jobs.ingest import IngestJob
    from jobs.tokens import TokenizeJob

    root = tmp_path_factory.mktemp("pipeline")
    run = Pipeline(root, root / "lake", root / "tokenizer", root / "shards", {})
    run.metrics["ingest"] = IngestJob().run(run.args("-p", f"warc_dir={crawl.warc_dir}"))
    run.metrics["extract"] = ExtractJob().run(run.args())
    run.metrics["tokenize"] = TokenizeJob().run(run.args())
    run.metrics["export"] = ExportJob().run(run.args())
    return run


# -- jobs.pipeline, whole -----------------------------------------------------------------------------
PIPELINE_TABLES = ("bronze/pages", "silver/documents", "silver/signals", "silver/quality", "silver/deduped",
                   "gold/tokens")


def pipeline_options(var: Path, warc_dir: Path) -> list[str]:
    """`jobs.pipeline` arguments for the fixture crawl.  Flag, not drop: the fixture's pages repeat one sentence
    shape (Gopher repetition would drop them all, and dedup's paragraph pass, digits folded, would leave each
    under its minimum length)."""
    return ["-o", f"paths.var={var}", "-p", f"warc_dir={warc_dir}", "-o", "quality.mode=flag",
            "-o", "dedup.paragraphs.mode=flag", "-o", "tokenize.vocab_size=400",
            "-o", "export.target_tokens_per_shard=400"]


@dataclass
class Snapshot:
    code: int
    out: str
    err: str
    state: dict
    metrics: dict       # stage -> bytes of <lake>/_metrics/<stage>.json
    versions: dict      # table -> Delta version
    manifest: dict | None


@dataclass
class Runs:
    lake: Path
    failed: Snapshot
    resumed: Snapshot
    again: Snapshot


def run_pipeline(lake: Path, shards: Path, argv: list[str]) -> Snapshot:
    """`jobs.pipeline` in this process (the tests' Spark session), and what it left behind."""
    import contextlib

    from deltalake import DeltaTable

    from jobs.pipeline import STAGE_NAMES, main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    metrics = {name: (lake / "_metrics" / f"{name}.json").read_bytes() for name in STAGE_NAMES
               if (lake / "_metrics" / f"{name}.json").exists()}
    versions = {t: DeltaTable(str(lake / t)).version() for t in PIPELINE_TABLES if (lake / t / "_delta_log").exists()}
    manifest = json.loads((shards / "manifest.json").read_text()) if (shards / "manifest.json").exists() else None
    state = json.loads((lake / "_pipeline" / "state.json").read_text())
    return Snapshot(code, out.getvalue(), err.getvalue(), state, metrics, versions, manifest)


@pytest.fixture(scope="session")
def pipeline_runs(spark, crawl, tmp_path_factory) -> Runs:
    """Three `jobs.pipeline` runs on the fixture crawl: one whose tokenize stage cannot write its model, then
    `--resume` with that fixed, then `--only export --report` again.  Its final lake is also the in-process
    reference that the standalone cluster run must equal."""
    var = tmp_path_factory.mktemp("pipeline-run")
    blocker = var / "blocker"
    blocker.write_text("a file where the tokenizer folder should be\n")
    common = pipeline_options(var, crawl.warc_dir) + ["-o", "extract.sandbox=false"]
    lake, shards = var / "lake", var / "shards"
    failed = run_pipeline(lake, shards, common + ["-p", f"tokenizer_dir={blocker}/tokenizer"])
    resumed = run_pipeline(lake, shards, common + ["--resume"])
    again = run_pipeline(lake, shards, common + ["--only", "export", "--report"])
    return Runs(lake, failed, resumed, again)
