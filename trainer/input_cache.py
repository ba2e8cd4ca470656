"""Inputs on object storage, staged to a local cache keyed by content hash before megatron-core reads them.

A manifest at a URI (`s3://bucket/shards/manifest.json`) is read and checked, then its folder is
mirrored into `<paths.cache_dir>/shards/<manifest sha256>/`: each shard's .bin/.idx is verified
against the manifest's `bin_sha256`/`idx_sha256` (a copy with the right hash is reused, never
fetched again; a download with the wrong hash is fetched again, then refused), and the docs.jsonl
sidecars come beside them.  A tokenizer model at a URI goes to `<cache_dir>/tokenizers/<sha256>/`.
megatron-core then reads local files only.  A local manifest is read where it is, without copying.
Not fsspec's filecache: it keys its copies by path and never checks them against the manifest's sha256.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import storage
from storage import is_uri, join
from trainer.manifest import Manifest, ManifestError, check_manifest, file_sha256, load_manifest, parse_manifest_json

log = logging.getLogger("trainer.input_cache")


@dataclass
class StagingReport:
    """What staging did: files fetched from the store, and cached copies reused after checking their hash."""
    downloaded: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    bytes_downloaded: int = 0


def open_manifest(location: str, cache_dir: str, attempts: int, verify: bool = True, shards: bool = True,
                  report: StagingReport | None = None) -> Manifest:
    """The manifest at `location` (a local path or a URI), with every file megatron-core reads on local disk.

    With `shards=False` only the manifest and its docs.jsonl sidecars are staged (provenance needs no tokens).
    """
    location, report = str(location), report if report is not None else StagingReport()
    began = time.perf_counter()
    if not is_uri(location):
        manifest = load_manifest(location, verify)
    else:
        local = stage_manifest(location, cache_dir, attempts, shards, report)
        # Staging verified every hash it needed; hashing the same files again would only cost time.
        manifest = load_manifest(local, verify=False, location=location, require_bins=shards)
    if shards and is_uri(manifest.tokenizer_model):
        staged = stage_tokenizer(manifest, cache_dir, attempts, report)
        manifest = dataclasses.replace(manifest, tokenizer_file=str(staged))
    if report.downloaded or report.reused:
        log.info("staged %s into %s in %.1f s: %d file(s) downloaded (%s), %d cached copies reused (sha256 "
                 "checked)", location, manifest.path.parent, time.perf_counter() - began, len(report.downloaded),
                 f"{report.bytes_downloaded / 2**20:.1f} MiB", len(report.reused))
    return manifest


def stage_manifest(uri: str, cache_dir: str, attempts: int, shards: bool, report: StagingReport) -> Path:
    """Mirror the manifest's folder into the cache; returns the local manifest.json."""
    try:
        data = storage.read_bytes(uri)
    except FileNotFoundError as exc:
        raise ManifestError(f"no manifest at {uri}; run the shard job first (SEAMS §4) or pass --manifest") from exc
    except Exception as exc:  # noqa: BLE001  (any client error: say which store and what to check)
        raise ManifestError(f"cannot read {uri} ({type(exc).__name__}: {exc}); check that the store is reachable "
                            "and the endpoint and credentials (conf/storage.yaml, AWS_* variables)") from exc
    raw = check_manifest(parse_manifest_json(data, uri), uri, verify=True)
    base = uri.rsplit("/", 1)[0]
    folder = Path(cache_dir) / "shards" / raw["sha256"]
    folder.mkdir(parents=True, exist_ok=True)
    for entry in raw["shards"]:
        name = entry["prefix"]
        wanted = [(name + suffix, entry[field], field) for suffix, field in ((".bin", "bin_sha256"),
                                                                             (".idx", "idx_sha256"))]
        # The sidecar has no hash in the manifest; it sits under the manifest's hash, so a new export is a new folder.
        for relative, digest, hash_field in [*(wanted if shards else []), (entry["docs"], None, "")]:
            parts = _relative(relative, uri)
            _stage_file(join(base, *parts), folder.joinpath(*parts), digest, attempts, report,
                        what=f"shard {name}: {PurePosixPath(relative).name}", hash_field=hash_field)
    local = folder / "manifest.json"
    if not local.is_file() or local.read_bytes() != data:
        storage.write_bytes(str(local), data)
    return local


def stage_tokenizer(manifest: Manifest, cache_dir: str, attempts: int, report: StagingReport) -> Path:
    """The tokenizer model at a URI, verified against the manifest's tokenizer.sha256, in the cache."""
    uri, digest = manifest.tokenizer_model, manifest.tokenizer_sha256
    if not digest:
        raise ManifestError(f"{manifest.location}: tokenizer.model is {uri} but tokenizer.sha256 is missing, so "
                            "the downloaded model cannot be checked (SEAMS §4); re-run the export job")
    local = Path(cache_dir) / "tokenizers" / digest / PurePosixPath(uri).name
    _stage_file(uri, local, digest, attempts, report, what=f"tokenizer {PurePosixPath(uri).name}",
                hash_field="tokenizer.sha256")
    return local


def _relative(name: str, manifest_uri: str) -> list[str]:
    """A manifest path's segments, refused when it would leave the manifest's folder."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or ".." in parts or is_uri(name):
        raise ManifestError(f"{manifest_uri}: {name!r} is not a path relative to the manifest's folder (SEAMS §4); "
                            "re-run the export job")
    return list(parts)


def _stage_file(src: str, dest: Path, sha256: str | None, attempts: int, report: StagingReport, what: str,
                hash_field: str) -> None:
    if dest.is_file() and (sha256 is None or file_sha256(dest) == sha256):
        report.reused.append(str(dest))
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.download")   # per process: two trainers may stage at once
    got = ""
    try:
        for attempt in range(1, attempts + 1):
            _download(src, tmp, what)
            got = file_sha256(tmp) if sha256 is not None else ""
            if sha256 is None or got == sha256:
                report.bytes_downloaded += tmp.stat().st_size
                os.replace(tmp, dest)
                report.downloaded.append(str(dest))
                return
            log.warning("%s: the copy downloaded from %s has sha256 %s…, the manifest's %s is %s… "
                        "(download %d of %d)%s", what, src, got[:12], hash_field, sha256[:12], attempt, attempts,
                        "; downloading again" if attempt < attempts else "")
    finally:
        tmp.unlink(missing_ok=True)
    raise ManifestError(f"{what} sha256 does not match the manifest's {hash_field} ({sha256[:12]}…): {src} gave "
                        f"{got[:12]}… in {attempts} download(s); the object is corrupt or was rewritten after the "
                        "manifest (re-run the export job)")


def _download(src: str, tmp: Path, what: str) -> None:
    try:
        storage.get_file(src, tmp)
    except FileNotFoundError as exc:
        raise ManifestError(f"{what}: {src} is missing; the manifest lists it, so the export on the store is "
                            "incomplete (re-run the export job)") from exc
    except Exception as exc:  # noqa: BLE001  (any client error: say which object and what to check)
        raise ManifestError(f"{what}: cannot download {src} ({type(exc).__name__}: {exc}); check that the store is "
                            "reachable and the endpoint and credentials (conf/storage.yaml, AWS_* variables)") from exc
