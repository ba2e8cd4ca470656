"""Durable I/O over local paths and object storage (s3://, gs://), shared by every part.

Paths come from `conf.paths.load_paths()` already absolute or as URIs; this module only reads and
writes them.  Object stores are reached through fsspec (s3fs, gcsfs), configured from
`conf/storage.yaml`; Spark reaches the same locations through `spark_uri()` and `spark_conf()`.
Writes are all-or-nothing: a local file is written beside its target, fsynced and renamed; an object
is one PUT (or one multipart upload), which S3 and GCS make visible only when complete.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import random
import shutil
import time
import uuid
from pathlib import Path
from typing import IO, Any, Iterator

from conf import INLINE_ENV
from conf.paths import is_uri, join  # noqa: F401  (re-exported: one notion of "URI" everywhere)
from storage.config import StorageConfig, load_storage_config

log = logging.getLogger("weblm.storage")


def _config() -> StorageConfig:
    # read again when what it is read from changes: `-o storage.…` sets $WEBLM_CONF_INLINE in a running process
    return _config_from(*(os.environ.get(name, "") for name in ("WEBLM_CONF_DIR", "WEBLM_CONF_OVERLAY", INLINE_ENV)))


@functools.lru_cache(maxsize=None)
def _config_from(conf_dir: str, overlays: str, inline: str) -> StorageConfig:
    return load_storage_config()


def reset() -> None:
    """Forget cached configuration and clients (tests that start a new S3 server, forked workers)."""
    _config_from.cache_clear()
    _filesystem_for.cache_clear()


def _protocol(path: str) -> str:
    if not is_uri(path):
        return "file"
    scheme = path.split("://", 1)[0] if "://" in path else path.split(":", 1)[0]
    return {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(scheme, scheme)


def storage_options(protocol: str) -> dict[str, Any]:
    """fsspec options for one protocol, from conf/storage.yaml (credentials stay with the provider's chain)."""
    cfg = _config()
    if protocol == "s3":
        client: dict[str, Any] = {"region_name": cfg.s3.region}
        if cfg.s3.endpoint_url:
            client["endpoint_url"] = cfg.s3.endpoint_url
        config: dict[str, Any] = {"retries": {"max_attempts": cfg.s3.max_attempts, "mode": "standard"},
                                  "connect_timeout": cfg.s3.connect_timeout_s, "read_timeout": cfg.s3.read_timeout_s}
        if cfg.s3.path_style:
            config["s3"] = {"addressing_style": "path"}
        # listings must reflect new files at once: a cached listing would hide WARC files written since
        return {"client_kwargs": client, "config_kwargs": config, "use_listings_cache": False}
    if protocol == "gs":
        options: dict[str, Any] = {"use_listings_cache": False}  # as for s3: new WARC files listed at once
        if cfg.gcs.project:
            options["project"] = cfg.gcs.project
        if cfg.gcs.endpoint_url:
            options["endpoint_url"] = cfg.gcs.endpoint_url
        if cfg.gcs.anonymous:
            options["token"] = "anon"
        return options
    return {}


def _filesystem(protocol: str):
    return _filesystem_for(protocol, _config())


@functools.lru_cache(maxsize=None)
def _filesystem_for(protocol: str, config: StorageConfig):   # one client per protocol and settings
    import fsspec

    if protocol == "gs" and config.gcs.endpoint_url:
        # gcsfs's default class asks Google's gRPC Storage Control API for each bucket's layout first; a GCS-compatible
        # server does not serve it, and each call would wait out a 60 s timeout: its JSON-API class alone instead
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(**storage_options(protocol))
    return fsspec.filesystem(protocol, **storage_options(protocol))


def filesystem(path: str):
    """`(fs, path_in_fs)` for a local path or URI."""
    protocol = _protocol(path)
    fs = _filesystem(protocol)
    return fs, (path if protocol == "file" else fs._strip_protocol(_canonical(path)))


def _canonical(path: str) -> str:
    for alias, canonical in (("s3a://", "s3://"), ("s3n://", "s3://"), ("gcs://", "gs://")):
        if path.startswith(alias):
            return canonical + path[len(alias):]
    return path


def _uri(protocol: str, path: str) -> str:
    return path if protocol == "file" else f"{protocol}://{path}"


# -- reading ------------------------------------------------------------------------------------------------
def open_file(path: str, mode: str = "rb", **kwargs) -> IO:
    """A file object for reading (or streaming writes that need no atomicity)."""
    fs, p = filesystem(path)
    return fs.open(p, mode, **kwargs)


def read_bytes(path: str) -> bytes:
    """The whole file, transient failures retried as `get_file`'s are."""
    fs, p = filesystem(path)
    return retrying(f"read of {path}", lambda: fs.cat_file(p))


def read_text(path: str, encoding: str = "utf-8") -> str:
    return read_bytes(path).decode(encoding)


def exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.exists(p)


def isdir(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.isdir(p)


def isfile(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.isfile(p)


def size(path: str) -> int:
    fs, p = filesystem(path)
    return int(fs.size(p))


def info(path: str) -> dict[str, Any]:
    fs, p = filesystem(path)
    return fs.info(p)


def glob(folder: str, pattern: str, recursive: bool = True) -> list[str]:
    """Files under `folder` whose name matches `pattern` (e.g. `*.warc.gz`), as full paths/URIs, sorted."""
    fs, p = filesystem(folder)
    protocol = _protocol(folder)
    found = fs.glob(f"{p.rstrip('/')}/{'**/' if recursive else ''}{pattern}")
    if recursive:  # fsspec's ** matches one or more folders here; the folder itself is level zero
        found += fs.glob(f"{p.rstrip('/')}/{pattern}")
    return sorted({_uri(protocol, f) for f in found if fs.isfile(f)})


def listdir(folder: str) -> list[str]:
    """Entries of a folder as full paths/URIs, sorted; [] when the folder does not exist."""
    fs, p = filesystem(folder)
    if not fs.exists(p):
        return []
    protocol = _protocol(folder)
    return sorted(_uri(protocol, e) for e in fs.ls(p, detail=False) if e.rstrip("/") != p.rstrip("/"))


# -- writing ------------------------------------------------------------------------------------------------
def makedirs(path: str) -> None:
    """Create a local folder (object stores have no folders: a no-op there)."""
    if not is_uri(path):
        os.makedirs(path, exist_ok=True)


def write_bytes(path: str, data: bytes) -> None:
    """All-or-nothing write: readers see the old content or the new, never a part."""
    if is_uri(path):
        fs, p = filesystem(path)
        fs.pipe_file(p, data)
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any file (mkstemp: 0600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str, text: str, encoding: str = "utf-8") -> None:
    write_bytes(path, text.encode(encoding))


def put_file(local: str | os.PathLike, path: str) -> None:
    """Copy a finished local file to `path` (local or URI), all-or-nothing, and check its size there."""
    local = str(local)
    expected = os.path.getsize(local)
    if is_uri(path):
        fs, p = filesystem(path)
        fs.put_file(local, p)
    else:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.part")
        shutil.copyfile(local, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    actual = size(path)
    if actual != expected:
        raise OSError(f"upload of {local} to {path} left {actual} bytes, expected {expected}")


def get_file(path: str, local: str | os.PathLike, resume: bool = False) -> None:
    """Copy `path` (local or URI) to a local file, all-or-nothing.  A transient failure (see `transient`) is retried
    with backoff (`storage.download`); a copy cut midway goes on from the bytes it has, where the source serves byte
    ranges (S3, GCS, most web servers), else starts again.

    With `resume`, a copy that an earlier process left behind (killed midway, or killed after the copy was whole) is
    taken up: its partial bytes go on from where they stopped, a whole copy is kept, as long as the source is still
    the one they came from (its size and whatever version marks the store gives: ETag, modification time, GCS
    generation; written beside the copy when it starts).  A failed copy then keeps its bytes for the next try."""
    target = Path(local)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    fs, p = filesystem(path)
    if resume:
        if _taken_up(path, fs, p, target, tmp):
            return
    else:
        tmp.unlink(missing_ok=True)

    def copy() -> None:
        have = tmp.stat().st_size if tmp.exists() else 0
        if have:
            try:
                return _resume(fs, p, tmp, have)
            except ValueError as exc:   # fsspec: the server ignores byte ranges (or gives no size): from the start
                log.warning("storage: %s cannot be resumed at byte %d (%s); copying it from the start", path, have,
                            exc)
                tmp.unlink()
        fs.get_file(p, str(tmp))

    try:
        retrying(f"copy of {path}", copy)
    except BaseException:
        if not resume:
            tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)


# what an object's info says of its version, by store: fsspec's HTTP (headers), s3fs, gcsfs, local files
_VERSION_KEYS = ("size", "ETag", "etag", "Last-Modified", "LastModified", "generation", "md5Hash", "mtime")


def _source_stamp(path: str, fs, p: str) -> str:
    info = retrying(f"lookup of {path}", lambda: fs.info(p))
    return json.dumps({"source": path} | {k: str(info[k]) for k in _VERSION_KEYS if info.get(k) is not None},
                      sort_keys=True)


def _taken_up(path: str, fs, p: str, target: Path, tmp: Path) -> bool:
    """Whether an earlier process's whole copy of `path` at `target` is kept as it is; else leaves at `tmp` only
    bytes that came from this version of the source (an earlier process's partial copy, or none)."""
    stamp_file = target.with_name(f".{target.name}.source")
    stamp = _source_stamp(path, fs, p)
    same = stamp_file.exists() and stamp_file.read_text() == stamp
    if same and target.exists() and str(target.stat().st_size) == json.loads(stamp).get("size"):
        log.warning("storage: keeping the whole copy of %s an earlier run left in %s (%d bytes)", path, target,
                    target.stat().st_size)
        return True
    if same and tmp.exists():
        log.warning("storage: taking up the copy of %s an earlier run left at byte %d", path, tmp.stat().st_size)
        return False
    if tmp.exists() or target.exists():
        log.warning("storage: %s changed since an earlier run copied part of it; copying it from the start", path)
    tmp.unlink(missing_ok=True)
    target.unlink(missing_ok=True)
    stamp_file.write_text(stamp)
    return False


def _resume(fs, p: str, tmp: Path, have: int, chunk: int = 8 << 20) -> None:
    """Append the rest of `p` from byte `have` to `tmp` (ranged reads through fsspec's file object)."""
    with fs.open(p, "rb") as src, open(tmp, "ab") as out:
        src.seek(have)
        while data := src.read(chunk):
            out.write(data)
        expected = getattr(src, "size", None)
    if expected is not None and tmp.stat().st_size != expected:
        raise OSError(f"resumed copy has {tmp.stat().st_size} bytes, the source {expected}")


# HTTP statuses worth another try: timeout, too early, throttled, and every server error
_RETRY_STATUSES = {408, 425, 429}
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError)


def _status(exc: BaseException) -> int | None:
    """The HTTP status an fsspec client's error carries: aiohttp's `.status`, gcsfs's `.code`, botocore's response."""
    response = getattr(exc, "response", None)
    status = getattr(exc, "status", None)
    if not isinstance(status, int):   # aiohttp's `.code` is a deprecated alias of `.status`: not read when it has one
        status = getattr(exc, "code", None)
    if not isinstance(status, int) and isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) and 100 <= status <= 599 else None


def transient(exc: BaseException) -> bool:
    """Whether another try may succeed: a 5xx, 408, 425 or 429, a dropped or timed-out connection.  A missing or
    forbidden file, another 4xx, or a bad argument fails at once."""
    status = _status(exc)
    if status is not None:
        return status >= 500 or status in _RETRY_STATUSES
    if isinstance(exc, _PERMANENT):
        # fsspec's HTTP `info` raises FileNotFoundError from whatever failed its GET, a 503 included: the cause decides
        return exc.__cause__ is not None and transient(exc.__cause__)
    return isinstance(exc, Exception)   # connection, payload and timeout errors of every client (OSError or not)


def _retry_after(exc: BaseException) -> float:
    """A server's `Retry-After` in seconds (the delta form), 0 without one."""
    headers = getattr(exc, "headers", None) or {}
    try:
        return float(headers.get("Retry-After", 0))
    except (TypeError, ValueError):
        return 0.0


def retrying(what: str, attempt):
    """`attempt()`, tried up to `storage.download.retries` times while it fails transiently, waiting with exponential
    backoff and jitter (or the server's Retry-After, if longer) between tries.  The uploads' loop (storage/upload.py)
    has the same shape; a library (tenacity, backoff) would add a dependency for these few lines."""
    s = _config().download
    delay = s.backoff_initial_s
    for n in range(1, max(1, s.retries) + 1):
        try:
            return attempt()
        except Exception as exc:  # noqa: BLE001  (classified by `transient`; the last one is raised)
            if n >= s.retries or not transient(exc):
                raise
            wait = max(min(delay, s.backoff_max_s) * (1 + 0.25 * random.random()),
                       min(_retry_after(exc), s.backoff_max_s))
            log.warning("storage: %s: attempt %d of %d failed (%s: %s); retrying in %.1f s", what, n, s.retries,
                        type(exc).__name__, exc, wait)
            time.sleep(wait)
            delay *= 2


def copy_tree(src: str, dest: str) -> list[str]:
    """Copy every file under `src` to the same relative path under `dest`; returns the copied destinations."""
    fs, p = filesystem(src)
    copied = []
    for name in fs.find(p):
        rel = name[len(p.rstrip("/")) + 1:]
        target = join(dest, *rel.split("/"))
        if is_uri(src):
            with fs.open(name, "rb") as data:
                write_bytes(target, data.read())
        else:
            put_file(name, target)
        copied.append(target)
    return copied


def move(src: str, dest: str) -> None:
    """Rename within one store: atomic on a local file system; copy-then-delete on object stores."""
    if not is_uri(src) and not is_uri(dest):
        os.replace(src, dest)
        return
    fs, p = filesystem(src)
    fs.copy(p, filesystem(dest)[1])  # not fs.mv: gcsfs's tries GCS's objects.move first, served for HNS buckets only
    fs.rm(p)


def sha256(path: str) -> str:
    """SHA-256 of a file's bytes as stored (local or URI), streamed by hashlib.file_digest."""
    import hashlib

    with open_file(path, "rb") as data:
        return hashlib.file_digest(data, "sha256").hexdigest()


def remove(path: str, recursive: bool = False) -> None:
    """Delete a file (or a tree with `recursive`); a missing path is not an error."""
    fs, p = filesystem(path)
    if fs.exists(p):
        fs.rm(p, recursive=recursive)


def walk_files(folder: str) -> Iterator[str]:
    """Every file under `folder`, as full paths/URIs."""
    fs, p = filesystem(folder)
    protocol = _protocol(folder)
    if fs.exists(p):
        for name in sorted(fs.find(p)):
            yield _uri(protocol, name)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename (or creation) in `folder` survive a crash of the machine."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


GOOGLE_STORAGE_URL = "https://storage.googleapis.com"


def object_store_options(path: str) -> dict[str, str]:
    """Options for Rust object_store clients (delta-rs `DeltaTable(path, storage_options=...)`).

    gs://: object_store takes a GCS endpoint only inside a service-account key (its `gcs_base_url`, with
    `disable_oauth` for no credentials), so an anonymous client gets such a key; credentialed clients on Google's
    endpoint use Google's own chain, as gcsfs does.  A custom endpoint with credentials is refused, not silently
    sent to Google.  Reads are tested against fake-gcs-server; uploads are not: fake-gcs-server answers
    object_store's uploads with 400.
    """
    protocol = _protocol(path)
    if protocol == "gs":
        return _object_store_gcs_options(_config().gcs)
    if protocol != "s3":
        return {}
    s3 = _config().s3
    options = {"AWS_REGION": s3.region}
    if s3.endpoint_url:
        options["AWS_ENDPOINT_URL"] = s3.endpoint_url
        options["AWS_ALLOW_HTTP"] = str(s3.endpoint_url.startswith("http://")).lower()
    if s3.path_style:
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    return options


def _object_store_gcs_options(gcs) -> dict[str, str]:
    if not gcs.anonymous:
        if gcs.endpoint_url:
            raise ValueError(f"gcs.endpoint_url {gcs.endpoint_url} with credentials: delta-rs (object_store) takes "
                             "a GCS endpoint only without them; set storage.gcs.anonymous: true for an emulator")
        return {}
    endpoint = (gcs.endpoint_url or GOOGLE_STORAGE_URL).rstrip("/")
    key = {"gcs_base_url": endpoint, "disable_oauth": True, "client_email": "", "private_key": "",
           "private_key_id": ""}
    return {"google_service_account_key": json.dumps(key), "allow_http": str(endpoint.startswith("http://")).lower()}


# -- Spark ----------------------------------------------------------------------------------------------------
def spark_uri(path: str) -> str:
    """The spelling Spark's Hadoop connectors need: s3:// -> s3a://; local paths and gs:// unchanged."""
    path = _canonical(path)
    return "s3a://" + path[len("s3://"):] if path.startswith("s3://") else path


def spark_conf() -> dict[str, str]:
    """Hadoop settings that point Spark's s3a and gs connectors where fsspec goes (conf/storage.yaml)."""
    s3, gcs = _config().s3, _config().gcs
    conf = {"spark.hadoop.fs.s3a.endpoint.region": s3.region,
            "spark.hadoop.fs.s3a.path.style.access": str(s3.path_style).lower(),
            "spark.hadoop.fs.s3a.attempts.maximum": str(s3.max_attempts),
            "spark.hadoop.fs.s3a.connection.establish.timeout": f"{int(s3.connect_timeout_s)}s",
            "spark.hadoop.fs.s3a.connection.timeout": f"{int(s3.read_timeout_s)}s"}
    if s3.endpoint_url:
        conf["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint_url
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(s3.endpoint_url.startswith("https")).lower()
    if gcs.project:
        conf["spark.hadoop.fs.gs.project.id"] = gcs.project
    if gcs.endpoint_url:  # gcs-connector's names (its CONFIGURATION.md)
        conf["spark.hadoop.fs.gs.storage.root.url"] = gcs.endpoint_url.rstrip("/") + "/"
    if gcs.anonymous:
        conf["spark.hadoop.fs.gs.auth.type"] = "UNAUTHENTICATED"
    return conf
