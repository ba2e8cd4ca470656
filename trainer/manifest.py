"""The shard manifest of SEAMS §4: read it, check it, and refuse shards that are not what it says.

The manifest's own `sha256` is the SHA-256 of the manifest without that field, serialised as
canonical JSON (`sort_keys=True`, separators `(",", ":")`, UTF-8): the same bytes whatever
indentation the writer used.  It is the dataset digest MLflow records and checkpoints pin.
"""
from __future__ import annotations

import hashlib
import json
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "megatron-indexed/1"
MIX_APPLIED_BY = "export"   # SEAMS §4: the shards already hold the sampled mix; this trainer blends shards by size


class ManifestError(ValueError):
    """A manifest or shard that cannot be trained on as it stands."""


@dataclass(frozen=True)
class Shard:
    prefix: str             # absolute path prefix of the .bin/.idx pair
    name: str               # the manifest's relative prefix, e.g. "shard-00000"
    documents: int
    tokens: int
    docs_path: Path         # the docs.jsonl sidecar: line i = sequence i's doc_id


@dataclass(frozen=True)
class Stage:
    """One stage of a staged mix (a broad mix, then an annealing one): trained in manifest order."""
    name: str
    shard_ids: tuple[int, ...]   # indices into Manifest.shards
    mix: str = ""


@dataclass(frozen=True)
class Manifest:
    path: Path              # the local file read (a staged copy when the manifest lives on object storage)
    location: str           # where it came from: that local path, absolute, or the URI it was staged from
    sha256: str
    vocab_size: int
    eod_id: int
    tokenizer_sha256: str
    tokenizer_model: str    # the manifest's tokenizer.model as given: a path or a URI (SEAMS §4)
    tokenizer_file: str     # where to read that model here: the staged copy of a URI, else tokenizer_model
    dtype: str
    shards: tuple[Shard, ...]
    sources: dict[str, Any]
    raw: dict[str, Any]
    mix: dict[str, Any] = dataclasses.field(default_factory=dict)   # the mix export sampled: name, weights, realized
    stages: tuple[Stage, ...] = ()   # in training order; one stage ("main") holding every shard when not staged

    @property
    def total_tokens(self) -> int:
        return sum(s.tokens for s in self.shards)


def canonical_sha256(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def check_manifest(raw: Any, where: str, verify: bool = True) -> dict[str, Any]:
    """The fields SEAMS §4 requires, and (with `verify`) the manifest's own sha256; returns `raw`."""
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ManifestError(f"{where}: format {found!r}, this trainer reads {FORMAT!r}")
    for key in ("tokenizer", "shards", "sha256", "dtype"):
        if key not in raw:
            raise ManifestError(f"{where}: missing field {key!r} (SEAMS §4)")
    if verify and canonical_sha256(raw) != raw["sha256"]:
        raise ManifestError(f"{where}: sha256 field {raw['sha256'][:12]}… does not match the manifest's content "
                            f"({canonical_sha256(raw)[:12]}…); the manifest was edited or written by another tool")
    if not raw["shards"]:
        raise ManifestError(f"{where}: lists no shards")
    mix = raw.get("mix") or {}
    if mix and mix.get("applied_by") != MIX_APPLIED_BY:
        raise ManifestError(f"{where}: mix {mix.get('name')!r} is to be applied by {mix.get('applied_by')!r}, but "
                            f"this trainer blends shards by size only and expects the jobs' export to have sampled "
                            f"the mix (SEAMS §4); re-export with the mix applied")
    return raw


def parse_manifest_json(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where} is not valid JSON: {exc}") from exc


def load_manifest(path: str | Path, verify: bool = True, location: str | None = None,
                  require_bins: bool = True) -> Manifest:
    """Parse `manifest.json`; with `verify`, check its own hash and every shard's .bin/.idx sha256.

    `location` is where the file came from when it is a staged copy of a manifest on object storage
    (trainer/input_cache.py); it is what checkpoints and MLflow record.  `require_bins=False` reads a
    folder that holds only the docs.jsonl sidecars (provenance needs no tokens).
    """
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"no manifest at {path}; run the shard job first (SEAMS §4) or pass --manifest")
    raw = check_manifest(parse_manifest_json(path.read_text(), str(path)), str(path), verify)
    folder = path.parent
    shards = []
    for entry in raw["shards"]:
        prefix = folder / entry["prefix"]
        for suffix, field in ((".bin", "bin_sha256"), (".idx", "idx_sha256")) if require_bins else ():
            shard_file = prefix.with_name(prefix.name + suffix)
            if not shard_file.is_file():
                raise ManifestError(f"shard {entry['prefix']}: {shard_file} is missing; the manifest at {path} "
                                    "lists it, so the shard folder is incomplete (re-run the shard job)")
            if verify and file_sha256(shard_file) != entry[field]:
                raise ManifestError(f"shard {entry['prefix']}: {shard_file.name} sha256 does not match the "
                                    f"manifest's {field} ({entry[field][:12]}…); the file is corrupt or was "
                                    "rewritten after the manifest (re-run the shard job)")
        docs_path = folder / entry["docs"]
        if not docs_path.is_file():
            raise ManifestError(f"shard {entry['prefix']}: docs sidecar {docs_path} is missing (needed for lineage)")
        shards.append(Shard(prefix=str(prefix), name=entry["prefix"], documents=int(entry["documents"]),
                            tokens=int(entry["tokens"]), docs_path=docs_path))
    tok = raw["tokenizer"]
    return Manifest(stages=read_stages(raw, shards, str(path)),path=path, location=location or str(path.resolve()), sha256=raw["sha256"],
                    vocab_size=int(tok["vocab_size"]), eod_id=int(tok["eod_id"]),
                    tokenizer_sha256=str(tok.get("sha256", "")), tokenizer_model=str(tok.get("model", "")),
                    tokenizer_file=str(tok.get("model", "")), dtype=raw["dtype"], shards=tuple(shards),
                    sources=dict(raw.get("sources", {})), raw=raw, mix=dict(raw.get("mix") or {}))


def read_stages(raw: dict[str, Any], shards: list[Shard], where: str) -> tuple[Stage, ...]:
    """The manifest's `stages` (SEAMS §4), each shard in exactly one; a manifest without them is one stage."""
    if not raw.get("stages"):
        return (Stage("main", tuple(range(len(shards)))),)
    index = {s.name: i for i, s in enumerate(shards)}
    stages, seen = [], []
    for entry in raw["stages"]:
        unknown = [p for p in entry.get("shards", []) if p not in index]
        if unknown:
            raise ManifestError(f"{where}: stage {entry.get('name')!r} names shards the manifest does not list: "
                                f"{unknown[:3]}")
        ids = tuple(index[p] for p in entry.get("shards", []))
        seen += ids
        if ids:   # a stage that sampled nothing has nothing to train on (export warned about it)
            stages.append(Stage(str(entry["name"]), ids, str(entry.get("mix", ""))))
    if sorted(seen) != list(range(len(shards))):
        raise ManifestError(f"{where}: its stages must hold every shard exactly once; they hold {sorted(seen)} "
                            f"of {len(shards)} shards")
    return tuple(stages)


def read_doc_ids(shard: Shard) -> list[str]:
    """doc_id of each sequence in the shard, in sequence order (the docs.jsonl sidecar)."""
    doc_ids: list[str] = []
    with open(shard.docs_path) as handle:
        for line_no, line in enumerate(handle):
            row = json.loads(line)
            if row["i"] != line_no:
                raise ManifestError(f"{shard.docs_path}:{line_no + 1}: sequence index {row['i']} out of order")
            doc_ids.append(row["doc_id"])
    if len(doc_ids) != shard.documents:
        raise ManifestError(f"{shard.docs_path}: {len(doc_ids)} lines but the manifest says "
                            f"{shard.documents} documents for {shard.name}")
    return doc_ids


def read_sources(shard: Shard) -> list[str]:
    """The mix source of each sequence in the shard (the docs.jsonl sidecar's `source`; "unknown" when absent)."""
    with open(shard.docs_path) as handle:
        return [json.loads(line).get("source") or "unknown" for line in handle]
