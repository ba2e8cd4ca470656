"""WARC/ARC files -> `bronze.pages` + `bronze.warc_files` (SEAMS §2 -> §3), incremental and idempotent.

    python -m jobs.ingest [--full] [--lake DIR] [-p warc_dir=DIR|s3://bucket/warc] [FILE_OR_DIR ...]
    python -m jobs.ingest --list warc.paths.gz        (Common Crawl: files at -o ingest.warc_list_base)
    spark-submit jobs/ingest.py ...

Lists the files under the inputs (`storage.glob`: local folders and s3:// alike) and those that WARC lists name
(`--list`, `ingest.warc_lists`: files on web servers too, such as Common Crawl's), leaves out those
that `bronze.warc_files` already holds with status ok at the same size (`--full` reads them all
again), and reads the rest on the executors as a DataFrame of (file, size) through `mapInArrow`:
each file becomes page rows, skip rows and one summary row (`jobs.warc.files.read_warc`), so every
record is accounted for (records_seen == rows + skips).  Pages are MERGEd into `bronze.pages` on
doc_id (insert-only), then each file's summary is MERGEd into `bronze.warc_files`: a file that failed
or was read in part is read again by the next run.  A run with nothing new commits nothing.  The crawl's records of
URLs it did not fetch (robots.txt or TDMRep refused them, or they failed for good: crawl.warc.not_fetched) are
counted as `not_fetched` skips and kept in `bronze.unfetched` (one row per record: URL, host, time, reason, detail,
where), so that every URL the crawl was given has a row somewhere in the lake.
"""
import argparse
import contextlib
import fcntl
import hashlib
import logging
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from datetime import datetime, timezone
from functools import partial
from typing import Iterator

import storage
from conf import ConfigError
from jobs.base import SparkJob, local_frame, merge_table, table_version
from tdmrep import WELL_KNOWN
from jobs.warc.files import read_warc
from jobs.warc.records import BRONZE_COLUMNS, NOT_FETCHED, NOT_FETCHED_FIELD, SKIP_COLUMNS, TRUNCATED

log = logging.getLogger("weblm.jobs.ingest")

PAGES = "bronze.pages"
WEB_SCHEMES = ("http://", "https://")
FILES = "bronze.warc_files"
SITE_FILES = "bronze.site_files"
UNFETCHED = "bronze.unfetched"


def bronze_schema():
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("doc_id", T.StringType()),
        T.StructField("url", T.StringType()),
        T.StructField("host", T.StringType()),
        T.StructField("fetch_time", T.TimestampType()),
        T.StructField("status", T.IntegerType()),
        T.StructField("content_type", T.StringType()),
        T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
        T.StructField("html", T.BinaryType()),
        T.StructField("charset", T.StringType()),
        T.StructField("payload_digest", T.StringType()),
        T.StructField("warc_file", T.StringType()),
        T.StructField("warc_offset", T.LongType()),
        T.StructField("warc_record_id", T.StringType()),
    ])


def warc_files_schema():
    """`bronze.warc_files`: one row per file ever read, the outcome of its last read (SEAMS §3)."""
    from pyspark.sql import types as T

    return T.StructType([
        T.StructField("file", T.StringType()),
        T.StructField("size", T.LongType()),
        T.StructField("modified", T.TimestampType()),
        T.StructField("records_seen", T.LongType()),
        T.StructField("rows", T.LongType()),
        T.StructField("skips", T.MapType(T.StringType(), T.LongType())),
        T.StructField("status", T.StringType()),
        T.StructField("error", T.StringType()),
        T.StructField("reader", T.StringType()),
        T.StructField("ingested_at", T.TimestampType()),
        T.StructField("run_id", T.StringType()),
    ])


def read_schema():
    """What the executors return: page, skip and file-summary rows in one table, told apart by `kind`."""
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("kind", T.StringType())] + bronze_schema().fields)
    for name in SKIP_COLUMNS:
        schema = schema.add(name, T.StringType())
    return (schema.add("records_seen", T.LongType()).add("rows", T.LongType())
            .add("skips", T.MapType(T.StringType(), T.LongType()))
            .add("file_status", T.StringType()).add("file_error", T.StringType()).add("reader", T.StringType()))


# -- listing ----------------------------------------------------------------------------------------------
def _modified(info: dict) -> datetime | None:
    """A file's modification time from fsspec's `info` (local: mtime; S3: LastModified; HTTP: Last-Modified), if it
    has one."""
    value = info.get("mtime", info.get("LastModified", info.get("updated", info.get("Last-Modified"))))
    if isinstance(value, str):   # GCS: ISO 8601; HTTP: RFC 2822
        from email.utils import parsedate_to_datetime

        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            try:
                value = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return None


def list_warc_files(inputs: list[str], patterns: list[str], entries: list[str] = (), stat_threads: int = 16
                    ) -> list[dict]:
    """Complete WARC/ARC files under the given folders (or the files themselves), and the files named in WARC lists
    (`entries`, see `read_warc_lists`), sorted by path: `{"file", "size", "modified"}` each.  Folders and files may
    be local paths or URIs (s3://, gs://, https://).

    The spider's open files end in `.open` and match none of the patterns, so they are never read.  A listed file
    that cannot be looked up (gone, refused) stays in with size -1: its read fails on the executor, and is counted
    and recorded in `bronze.warc_files` like any unreadable file, to be tried again by the next run.
    """
    found: set[str] = set()
    for item in inputs:
        if not storage.is_uri(item):
            item = os.path.abspath(item)  # a command-line argument: relative to where the user runs it
        if item.startswith(WEB_SCHEMES):
            found.add(item)   # a web server has no folders to list (fsspec would download the file to look for links)
        elif storage.isdir(item):
            for pattern in patterns:
                found.update(storage.glob(item, pattern))
        elif storage.isfile(item):
            found.add(item)
        else:
            raise FileNotFoundError(f"WARC input {item} does not exist; check paths.warc_dir or the arguments")
    found.update(entries)

    def described(path: str) -> dict:
        try:
            info = storage.retrying(f"lookup of {path}", lambda: storage.info(path))   # a busy server's 503 passes
            return {"file": path, "size": int(info["size"]), "modified": _modified(info)}
        except Exception as exc:  # noqa: BLE001  (the executor's read reports it, with the file's other failures)
            log.warning("ingest: cannot look up %s (%s: %s); its read will say why", path, type(exc).__name__, exc)
            return {"file": path, "size": -1, "modified": None}

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, stat_threads)) as pool:   # one request per remote file: in parallel
        return list(pool.map(described, sorted(found)))


def read_warc_lists(lists: list[str], base: str) -> list[str]:
    """The files named in WARC lists: one path or URI per line (Common Crawl's `warc.paths.gz`, a list of your own),
    gzipped or not, local or at a URI; blank lines and `#` comments are skipped.  A relative line is joined to
    `base` (Common Crawl's lines are relative to its bucket: https://data.commoncrawl.org/ or s3://commoncrawl/)."""
    import gzip

    files: list[str] = []
    for source in lists:
        try:
            data = storage.read_bytes(source if storage.is_uri(source) else os.path.abspath(source))
        except FileNotFoundError as exc:
            raise ConfigError(f"WARC list {source} does not exist; check ingest.warc_lists or --list") from exc
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        for line in data.decode("utf-8").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if storage.is_uri(line) or os.path.isabs(line):
                files.append(line)
            elif not base:
                raise ConfigError(f"WARC list {source}: line {line!r} is relative and ingest.warc_list_base is empty")
            else:
                files.append(storage.join(base, line))
    return files


# -- the executors' side -----------------------------------------------------------------------------------
HTML_SOURCE = "x-weblm-html-source"  # in `headers` when `html` is the crawl's rendered DOM: "rendered <conversion id>"


def rendered_doms(path: str) -> dict[str, tuple[str, bytes]]:
    """The crawl's rendered DOMs in one WARC file (`conversion` records, spider/render): response id -> (id, DOM).

    A file that cannot be read here gives none: its pages keep the plain HTML, and read_warc reports the damage.
    """
    if ".warc" not in path:
        return {}  # ARC files predate rendering
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    found: dict[str, tuple[str, bytes]] = {}
    try:
        with storage.open_file(path, "rb") as stream:
            for record in ArchiveIterator(stream, record_types=WarcRecordType.conversion, parse_http=False):
                refers_to = record.headers.get("WARC-Refers-To")
                if refers_to and (record.headers.get("Content-Type") or "").startswith("text/html"):
                    found[refers_to] = (record.record_id, record.reader.read())
    except Exception as exc:  # noqa: BLE001  (damage is read_warc's to count; the plain HTML stands)
        log.warning("ingest: rendered DOMs of %s not read (%s); its pages keep their plain HTML", path, exc)
    return found


def with_rendered_dom(row: dict, rendered: dict[str, tuple[str, bytes]]) -> dict:
    """A 200 page the crawl rendered: extract from the rendered DOM (UTF-8), and say so in `headers`."""
    conversion = rendered.get(row["warc_record_id"])
    if conversion is None or row["status"] != 200:
        return row
    record_id, dom = conversion
    return dict(row, html=dom, charset="utf-8",
                headers={**(row["headers"] or {}), HTML_SOURCE: f"rendered {record_id}"})


def read_files(batches, cfg, arrow_schema):
    """`mapInArrow` body: (file, size) batches in, page/skip/summary rows out as Arrow batches.

    A batch is closed at `cfg.batch_rows` rows or `cfg.batch_bytes` of payload, whichever comes first.
    """
    import pyarrow as pa

    names = arrow_schema.names
    rows: list[dict] = []
    payload = 0
    for batch in batches:
        for file, size in zip(batch.column("file").to_pylist(), batch.column("size").to_pylist()):
            for row in read_file(file, size, cfg):
                rows.append({name: row.get(name) for name in names})
                payload += len(row.get("html") or b"")
                if len(rows) >= cfg.batch_rows or payload >= cfg.batch_bytes:
                    yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
                    rows, payload = [], 0
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)


def read_file(file: str, size: int, cfg) -> Iterator[dict]:
    """One file's rows: pages (with the crawl's rendered DOM where it has one), skips, then its summary."""
    with fetched(file, size, cfg) as local:
        rendered = rendered_doms(local)
        for row in read_warc(local, cfg, warc_file=file):
            if rendered and row["kind"] == "page":
                row = with_rendered_dom(row, rendered)
            if row["kind"] == "file":  # `status` of a page is its HTTP status: the file's gets its own column
                row = dict(row, file_status=row["status"], file_error=row["error"], status=None, error=None)
            yield row


# An executor killed while copying a file leaves its folder behind; the next run on that machine takes the copy up.
# Folders of files no run came back for are removed after this long.
STALE_COPY_S = 3 * 86400


@contextlib.contextmanager
def fetched(file: str, size: int, cfg) -> Iterator[str]:
    """Where to read `file` from: a copy on this executor's disk when it is remote and `cfg.fetch_remote` (reading
    a file takes four passes: the rendered DOMs, the record count, the records, the tail check; one download
    instead of four reads over the network), removed afterwards; else the file itself.  The copy retries transient
    failures and goes on from where a cut one stopped (`storage.get_file`, `storage.download`).  Its folder is the
    file's own (`weblm-ingest/<hash>` under `ingest.copy_dir`), held with a lock while in use: so when an executor
    is killed midway, the next run that reads the file on this machine goes on from the bytes already copied (while
    the source is unchanged) instead of downloading it again.  A task that finds the folder locked (the same file
    read twice at once: a speculative task) copies into a folder of its own.  Without room for the copy, or when
    it fails past its retries, the file is read where it is (and its passes fail or not, and say so); a failed copy
    keeps its bytes in its folder, so that the next run goes on from them (the source unchanged) rather than from 0.
    Not fsspec's simplecache: it copies straight to the cached name, so a copy cut by a kill is later read as whole."""
    if not cfg.fetch_remote or not storage.is_uri(file):
        yield file
        return
    root = copy_root(file, cfg.copy_dir)
    base = os.path.join(root, "weblm-ingest")
    _remove_stale_copies(base)
    folder = os.path.join(base, hashlib.sha256(file.encode()).hexdigest()[:32])
    lock = _claim(folder)
    if lock is None:
        folder = tempfile.mkdtemp(prefix="weblm-ingest-", dir=root)
    keep = False   # a failed copy's bytes, for the next run on this machine (the stale sweep removes them otherwise)
    try:
        if size is not None and size >= 0 and shutil.disk_usage(folder).free < 2 * size:
            log.warning("ingest: no room for a copy of %s (%d bytes) in %s: reading it over the network", file, size,
                        folder)
            yield file
            return
        local = os.path.join(folder, file.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "file")  # its suffix: reader
        try:
            storage.get_file(file, local, resume=lock is not None)
        except Exception as exc:  # noqa: BLE001  (the reads below report what is wrong with it)
            keep = lock is not None and any(e.name.endswith(".part") and e.stat().st_size for e in os.scandir(folder))
            log.warning("ingest: could not copy %s here (%s: %s): reading it over the network%s", file,
                        type(exc).__name__, exc, "; the bytes copied so far stay for the next run" if keep else "")
            yield file
            return
        yield local
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
        if lock is not None:
            os.close(lock)


def copy_root(file: str, copy_dir: str) -> str:
    """The folder on this worker under which `file` is copied (`ingest.copy_dir`)."""
    if copy_dir == "spark":   # the executor's scratch folders (on YARN, the node's data disks), where pyspark spills
        scratch = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d and os.path.isdir(d)]
        if scratch:
            return scratch[zlib.crc32(file.encode()) % len(scratch)]
    elif copy_dir:
        os.makedirs(copy_dir, exist_ok=True)
        return copy_dir
    return tempfile.gettempdir()


def _claim(folder: str) -> int | None:
    """An exclusive lock on `folder` (created if need be), as an open descriptor; None when another process holds
    it, or removed the folder between our opening and locking its lock file."""
    path = os.path.join(folder, ".lock")
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            return fd
    except OSError:   # held by another process (BlockingIOError), or the lock file is gone
        pass
    os.close(fd)
    return None


def _remove_stale_copies(base: str) -> None:
    """Remove the folders under `base` that no process holds and nothing touched for STALE_COPY_S."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        try:
            if time.time() - entry.stat().st_mtime < STALE_COPY_S:
                continue
        except OSError:
            continue
        lock = _claim(entry.path)
        if lock is not None:
            log.warning("ingest: removing %s, a copy left %.0f days ago by a run that never came back for it",
                        entry.path, (time.time() - entry.stat().st_mtime) / 86400)
            shutil.rmtree(entry.path, ignore_errors=True)
            os.close(lock)


def _resolved(base, location):
    """A redirect's Location against the URL that answered it (RFC 9110 §10.2.2: it may be relative), by urljoin in a
    pandas UDF: only the site files' redirects go through it."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def resolve(bases, locations):
        from urllib.parse import urljoin

        import pandas as pd

        return pd.Series([urljoin(b, loc.strip()) for b, loc in zip(bases, locations)])

    return resolve(base, location)


# -- the job -------------------------------------------------------------------------------------------------
class IngestJob(SparkJob):
    name = "ingest"
    description = "WARC/ARC files -> bronze.pages (MERGE on doc_id) + bronze.warc_files (one row per file)"

    def add_arguments(self, parser):
        parser.add_argument("inputs", nargs="*", help="WARC files or folders, local or s3://, gs://, https:// "
                            "(default: paths.warc_dir, unless ingest.warc_lists or --list names the files)")
        parser.add_argument("--list", dest="lists", action="append", default=[], metavar="FILE",
                            help="a WARC list: one path or URI per line, gzipped or not (Common Crawl's warc.paths.gz),"
                            " relative lines joined to ingest.warc_list_base; adds to ingest.warc_lists")
        try:
            parser.add_argument("--full", action="store_true",
                                help="read every file again, also those bronze.warc_files has as ok")
        except argparse.ArgumentError:  # jobs.base may offer --full to every job; the meaning is the same
            pass

    def run_job(self, spark, args):
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        cfg = self.cfg.ingest
        run_id = uuid.uuid4().hex
        ingested_at = datetime.now(timezone.utc)
        lists = [*cfg.warc_lists, *args.lists]
        entries = read_warc_lists(lists, cfg.warc_list_base)
        if lists:
            log.info("ingest: %d files named in %d WARC list(s)", len(entries), len(lists))
        inputs = args.inputs or ([] if lists else [self.paths.warc_dir])
        listed = list_warc_files(inputs, cfg.patterns, entries, cfg.stat_threads)
        self.metrics.extra.update(run_id=run_id, warc_files=len(listed))
        if not listed:
            log.warning("ingest: no WARC files under %s matching %s: nothing to ingest, no table written; "
                        "check paths.warc_dir (or the arguments) and that the crawl has closed files there",
                        ", ".join(inputs), " ".join(cfg.patterns))
            self.metrics.extra.update(files_to_read=0, files_by_status={})
            return
        todo = listed if args.full else self._not_yet_ingested(spark, listed)
        self.metrics.extra.update(files_already_ingested=len(listed) - len(todo), files_to_read=len(todo))
        if not todo:
            log.info("ingest: all %d WARC files are in %s with status ok: nothing new, no table changed",
                     len(listed), FILES)
            self.metrics.extra.update(files_by_status={})
            return
        log.info("ingest: %d of %d WARC files to read%s, %d per task", len(todo), len(listed),
                 " (--full)" if args.full else "", cfg.files_per_task)

        from pyspark.sql.pandas.types import to_arrow_schema

        schema = read_schema()
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        files = local_frame(spark, [(f["file"], f["size"]) for f in todo], "file string, size long")
        slices = max(1, math.ceil(len(todo) / max(1, cfg.files_per_task)))
        read = (files.repartition(slices).mapInArrow(partial(read_files, cfg=cfg, arrow_schema=arrow_schema), schema)
                .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            summaries = (read.where("kind = 'file'")
                         .select("warc_file", "records_seen", "rows", "skips", "reader",
                                 F.col("file_status").alias("status"), F.col("file_error").alias("error"))
                         .collect())
            outcomes = self._account(summaries)
            self.record_skips(read.where("kind = 'skip'"), "skip_reason",
                              ["warc_file", "warc_offset", "skip_detail"], routine=["other_record_type", NOT_FETCHED])
            pages = read.where("kind = 'page'").select(*BRONZE_COLUMNS)
            # the same WARC-Record-ID twice (a file copied under two names): keep the first copy
            from pyspark.sql import Window

            first = Window.partitionBy("doc_id").orderBy("warc_file", "warc_offset")
            ranked = pages.withColumn("_copy", F.row_number().over(first))
            duplicates = ranked.where("_copy > 1").count()
            if duplicates:
                self.metrics.skip("duplicate_record_id", duplicates)
            unique = ranked.where("_copy = 1").drop("_copy")
            pages_from_rendered = unique.where(F.col("headers").getItem(HTML_SOURCE).isNotNull()).count()
            truncated = dict(unique.select(F.col("headers").getItem(TRUNCATED).alias("reason"))
                             .where("reason IS NOT NULL").groupBy("reason").count().collect())
            result = merge_table(spark, unique, self.table(PAGES), "doc_id", sync=False)
            sites = self._keep_site_files(spark, unique)
            unfetched = self._keep_unfetched(spark, read)
        finally:
            read.unpersist()
        # the manifest is written after the pages: a run killed in between reads those files again (idempotently)
        manifest = self._manifest_rows(todo, outcomes, ingested_at, run_id)
        files_result = upsert_warc_files(spark, spark.createDataFrame(manifest, warc_files_schema()), self.table(FILES))
        self.metrics.output_rows = result["inserted"]
        self.metrics.extra["pages_from_rendered_dom"] = pages_from_rendered  # html is the crawl's rendered DOM
        self.metrics.extra["pages_truncated"] = dict(sorted(truncated.items()))
        if truncated:
            log.warning("%d page(s) whose WARC record says the crawler cut the body (WARC-Truncated: %s): kept, "
                        "marked in bronze.pages headers['%s']", sum(truncated.values()),
                        ", ".join(f"{reason} {n}" for reason, n in sorted(truncated.items())), TRUNCATED)
        self.metrics.extra.update(site_files_table=SITE_FILES, site_files_inserted=sites["inserted"])
        self.metrics.extra.update(unfetched_table=UNFETCHED, unfetched_inserted=unfetched["inserted"],
                                  unfetched_by_reason=unfetched["by_reason"])
        self.metrics.extra.update(table=PAGES, table_version=result["version"], rows_inserted=result["inserted"],
                                  pages_read=sum(o["rows"] for o in outcomes.values()),
                                  files_table=FILES, files_table_version=files_result["version"],
                                  files_rows_changed=files_result["inserted"] + files_result["updated"])
        by_status = self.metrics.extra["files_by_status"]
        if by_status.get("failed", 0) == len(todo):
            first = next(o["error"] for o in outcomes.values())
            raise RuntimeError(f"every one of the {len(todo)} WARC files failed (first: {first}); "
                               f"they are recorded in {FILES} and will be retried: check the storage "
                               "credentials and that the files are WARC/ARC")

    def _keep_site_files(self, spark, pages) -> dict:
        """`bronze.site_files`: the pages of this run that are a host's site-wide file extract reads (TDMRep's
        `/.well-known/tdmrep.json`: the `tdmrep` package), a few per host, kept apart so that extract joins them to
        the host's pages without scanning every page's html.  A lake ingested before the table existed gets it from
        all of bronze.pages once (the run that creates it).  A file's URL that redirects to another path stands with
        the answer the redirect led to, when that page is in the same run (the crawl fetches it right after)."""
        from pyspark.sql import functions as F

        path = self.table(SITE_FILES)
        if table_version(spark, path) is None:
            pages = spark.read.format("delta").load(self.table(PAGES))
        columns = ("doc_id", "url", "host", "fetch_time", "status", "html", "warc_file", "warc_offset")
        asked = pages.where(F.col("url").endswith(WELL_KNOWN))
        files = asked.select(*columns)
        # a redirect from the file's place to another path (a CDN, /tdmrep.json): the answer it leads to, in this
        # run's pages, stands as the answer to the URL asked (its doc_id, URL and time; the target's status and body)
        hops = (asked.where(F.col("status").between(300, 399) & F.col("headers")["location"].isNotNull())
                .select("doc_id", "url", "host", "fetch_time",
                        _resolved(F.col("url"), F.col("headers")["location"]).alias("target")))
        target = pages.where(~F.col("url").endswith(WELL_KNOWN) & ~F.col("status").between(300, 399))
        landed = (target.alias("p").join(F.broadcast(hops).alias("h"), F.col("p.url") == F.col("h.target"))
                  .select("h.doc_id", "h.url", "h.host", "h.fetch_time", "p.status", "p.html", "p.warc_file",
                          "p.warc_offset")
                  .dropDuplicates(["doc_id"]))   # the same URL fetched twice in the run: either answer
        files = files.join(landed.select("doc_id"), "doc_id", "left_anti").unionByName(landed)
        return merge_table(spark, files, path, "doc_id", sync=False)

    def _keep_unfetched(self, spark, read) -> dict:
        """`bronze.unfetched`: the crawl's records of URLs it did not fetch in this run's files, one row each (a URL
        refused again at its next recrawl is a new row: each says when), keyed like a page by its record id."""
        from pyspark.sql import functions as F

        rows = (read.where((F.col("kind") == "skip") & (F.col("skip_reason") == NOT_FETCHED)
                           & F.col("doc_id").isNotNull())
                .select("doc_id", "url", "host", F.col("fetch_time").alias("time"),
                        F.col("headers")[NOT_FETCHED_FIELD].alias("reason"), F.col("headers")["detail"].alias("detail"),
                        "warc_file", "warc_offset", "warc_record_id")
                .dropDuplicates(["doc_id"]))
        by_reason = dict(sorted(rows.groupBy("reason").count().collect()))
        result = merge_table(spark, rows, self.table(UNFETCHED), "doc_id", sync=False)
        return {**result, "by_reason": by_reason}

    def _not_yet_ingested(self, spark, listed: list[dict]) -> list[dict]:
        """Files that bronze.warc_files does not hold as ok at this size (a grown or replaced file is new).  A file
        whose size could not be looked up this run (size -1: its server kept failing) but that is held as ok is
        not read again: reading a 1 GB file again because a HEAD failed would cost its download for nothing."""
        path = self.table(FILES)
        if table_version(spark, path) is None:
            return listed
        done = {(r["file"], r["size"]) for r in
                spark.read.format("delta").load(path).where("status = 'ok'").select("file", "size").collect()}
        held = {file for file, _ in done}
        unknown = {f["file"] for f in listed if f["size"] < 0 and f["file"] in held}
        if unknown:
            log.warning("ingest: %d file(s) held as ok in %s could not be looked up this run (e.g. %s); not read "
                        "again", len(unknown), FILES, min(unknown))
        return [f for f in listed if (f["file"], f["size"]) not in done and f["file"] not in unknown]

    def _account(self, summaries) -> dict[str, dict]:
        """Per-file outcomes into the metrics and the log; failed and partial files are named with their error."""
        outcomes = {row["warc_file"]: row.asDict() for row in summaries}
        by_status = Counter(o["status"] for o in outcomes.values())
        self.metrics.input_rows = sum(o["records_seen"] for o in outcomes.values())
        self.metrics.extra.update(files_by_status={s: by_status.get(s, 0) for s in ("ok", "partial", "failed")},
                                  records_seen=self.metrics.input_rows)
        for file, outcome in sorted(outcomes.items()):
            if outcome["status"] == "failed":
                log.error("WARC file %s failed: %s; the job goes on, the next run tries it again", file,
                          outcome["error"])
            elif outcome["status"] == "partial":
                log.warning("WARC file %s read in part (%d of %d records as pages): %s", file, outcome["rows"],
                            outcome["records_seen"], outcome["error"])
        log.info("ingest: files ok=%d partial=%d failed=%d, %d records seen", by_status.get("ok", 0),
                 by_status.get("partial", 0), by_status.get("failed", 0), self.metrics.input_rows)
        return outcomes

    @staticmethod
    def _manifest_rows(todo: list[dict], outcomes: dict[str, dict], ingested_at: datetime, run_id: str) -> list[tuple]:
        rows = []
        for f in todo:
            o = outcomes.get(f["file"]) or {  # a file with no summary row: its task never reported it
                "records_seen": 0, "rows": 0, "skips": {}, "status": "failed", "reader": None,
                "error": "no summary came back from the executors; run ingest again"}
            rows.append((f["file"], f["size"], f["modified"], o["records_seen"], o["rows"],
                         dict(sorted((o["skips"] or {}).items())), o["status"], o["error"], o["reader"],
                         ingested_at, run_id))
        return rows



def upsert_warc_files(spark, df, path: str) -> dict:
    """MERGE per-file outcomes on `file`: insert new files, update those whose outcome changed.

    `ingested_at` and `run_id` alone do not make a change, so re-reading a partial file that reads the
    same way again commits nothing.  (`jobs.base.merge_table` cannot do this: it compares every
    column, and Spark cannot compare the `skips` map; here maps are compared as sorted JSON.)
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if not DeltaTable.isDeltaTable(spark, path):
        df.write.format("delta").mode("errorifexists").save(path)
        return {"inserted": df.count(), "updated": 0, "version": table_version(spark, path)}
    outcome = ("size", "modified", "records_seen", "rows", "status", "error", "reader")
    differs = " OR ".join([f"NOT (t.`{c}` <=> s.`{c}`)" for c in outcome] +
                          ["NOT (to_json(t.skips) <=> to_json(s.skips))"])
    target = spark.read.format("delta").load(path)
    pending = (df.alias("s").join(target.alias("t"), F.col("s.file") == F.col("t.file"), "left")
               .where(f"t.file IS NULL OR {differs}").limit(1).count())
    if not pending:
        return {"inserted": 0, "updated": 0, "version": table_version(spark, path)}
    (DeltaTable.forPath(spark, path).alias("t").merge(df.alias("s"), "t.file = s.file")
     .whenMatchedUpdateAll(condition=differs).whenNotMatchedInsertAll().execute())
    version = table_version(spark, path)
    history = DeltaTable.forPath(spark, path).history(1).select("operationMetrics").first()[0] or {}
    return {"inserted": int(history.get("numTargetRowsInserted", 0)),
            "updated": int(history.get("numTargetRowsUpdated", 0)), "version": version}


if __name__ == "__main__":
    sys.exit(IngestJob.main())
