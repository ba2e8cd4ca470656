"""Which documents did a checkpoint see?  `python -m trainer.provenance CHECKPOINT [--out FILE] [--step N]`

Recomputes every training step's global batch up to the checkpoint's step from its config and the
manifest's shards (a batch is a pure function of the seed, the step, the shards and the batches a rollback
left out: trainer/data.py), checks each against the digest the run logged in `lineage/batches.jsonl`,
and with the manifest's `docs.jsonl` sidecars names every document the model trained on: doc_id, URL,
how many samples drew on it, and the first step that did.  The doc_id leads on to `silver.documents`,
`bronze.pages` and the WARC record (SEAMS §3), so a checkpoint traces back to the fetched URL.  The checkpoint, the lineage, the
manifest and `--out` may each be a local path or a URI (s3://…); remote ones are read through
`paths.cache_dir` (`-o paths.cache_dir=DIR`).

`--step N` answers for one training step: its samples, their sequences, doc_ids and URLs.
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlsplit

import storage
from conf import ConfigError, split_paths_overrides
from conf.paths import is_uri, load_paths
from trainer.checkpoint import CheckpointError, download_checkpoint, read_checkpoint
from trainer.input_cache import open_manifest
from trainer.lineage import batch_digest, parse_lines
from trainer.manifest import ManifestError, load_manifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeenDocument:
    doc_id: str
    url: str
    samples: int        # training samples (sequences of seq_length tokens) that drew tokens from it
    first_step: int


def documents_seen(checkpoint: str | Path, lineage: str | Path | None = None,
                   cache_dir: str | None = None) -> tuple[dict, list[SeenDocument]]:
    """The checkpoint's meta and every document its training steps drew from, most used first.

    Every step's batch is recomputed from the checkpoint's config and the manifest's shards, and checked
    against the digest the run logged for it in the lineage file (when there is one): a mismatch means
    the shards, the settings or the code changed since training, and is an error.
    `cache_dir` holds what is fetched from object storage (default: paths.cache_dir).
    """
    checkpoint = str(checkpoint)
    lineage = str(lineage) if lineage else _default_lineage(checkpoint)
    logged = _logged_digests(lineage)
    samples, first, differs = Counter(), {}, []
    with _recomputation(checkpoint, cache_dir) as batches:
        for step in range(batches.steps):
            records = batches.records(step)
            if step in logged and logged[step] != batch_digest(records):
                differs.append(step)
            for record in records:
                for doc_id in set(record["doc_ids"]):
                    samples[doc_id] += 1
                    first.setdefault(doc_id, step)
        meta, urls = batches.meta, batches.urls
    if differs:
        raise CheckpointError(f"the batches recomputed for steps {differs[:10]}{'…' if len(differs) > 10 else ''} "
                              f"do not match the digests {lineage} logged in training: the shards, the trainer "
                              "settings or the code changed since; use the same ones to name the documents")
    unverified = batches.steps - sum(1 for s in logged if s < batches.steps)
    if unverified:
        log.warning("%d of the %d steps behind %s have no digest in %s: their documents are recomputed, unchecked",
                    unverified, batches.steps, checkpoint, lineage)
    seen = [SeenDocument(d, urls.get(d, ""), n, first[d]) for d, n in samples.most_common()]
    return meta, seen


def _logged_digests(lineage: str) -> dict[int, str]:
    """step -> the digest the run logged ({} without a lineage file); lines of `full` runs from before digests
    existed are digested here."""
    if not storage.exists(lineage):
        log.warning("no lineage file %s: batches are recomputed without a check against what training logged",
                    lineage)
        return {}
    logged = {}
    with storage.open_file(lineage, "rb") as raw, io.TextIOWrapper(raw, encoding="utf-8") as handle:
        for record in parse_lines(handle, lineage):
            digest = record.get("digest") or (batch_digest(record["samples"]) if "samples" in record else None)
            if digest:
                logged[int(record["step"])] = digest
    return logged


def _default_lineage(checkpoint: str) -> str:
    """`<run>/checkpoints/step-N.pt` (or the folder `step-N/`) -> `<run>/lineage/batches.jsonl`, for paths and URIs."""
    if is_uri(checkpoint):
        return checkpoint.rstrip("/").rsplit("/", 2)[0] + "/lineage/batches.jsonl"
    return str(Path(checkpoint).parent.parent / "lineage" / "batches.jsonl")


@dataclass
class Recomputed:
    meta: dict
    steps: int                    # steps the checkpoint completed: 0..steps-1
    urls: dict[str, str]          # doc_id -> URL, from the shards' docs.jsonl sidecars
    records: Callable[[int], list[dict]]   # step -> its global batch's lineage records


@contextmanager
def _recomputation(checkpoint: str, cache_dir: str | None) -> Iterator[Recomputed]:
    """The checkpoint's batches, recomputed on this machine's CPU whatever the run's device and layout (batches
    depend on neither)."""
    from conf import build
    from trainer.backend import open_backend
    from trainer.config import ParallelConfig, TrainerConfig
    from trainer.data import build_datasets, global_batch_indices, lineage_record
    from trainer.stability import batch_index

    cache = lambda: cache_dir or load_paths().cache_dir   # noqa: E731  (read only when something is remote)
    payload = _read_checkpoint(checkpoint, cache)
    meta, progress = payload["meta"], payload["progress"]
    one_process = {f.name: 1 for f in fields(ParallelConfig)}   # every degree, present and future
    cfg = build(TrainerConfig, _current_keys(meta["config"]) | {"backend": "cpu", "parallel": one_process})
    location = meta["manifest_path"]
    manifest = (open_manifest(location, cache(), attempts=1, verify=False) if is_uri(location)
                else load_manifest(location, verify=False))
    if manifest.sha256 != meta["manifest_sha256"]:
        raise ManifestError(f"{manifest.location} has changed since {checkpoint} was trained on it "
                            f"({manifest.sha256[:12]} != {meta['manifest_sha256'][:12]}); its doc_ids may not match")
    urls = {}
    for shard in manifest.shards:
        with open(shard.docs_path) as handle:
            urls.update((row["doc_id"], row.get("url", "")) for row in map(json.loads, handle))
    skip = progress.get("skip_batches", [])
    with tempfile.TemporaryDirectory(prefix="provenance-index-") as index_cache, open_backend(cfg):
        datasets = build_datasets(cfg, manifest, Path(index_cache))

        def records(step: int) -> list[dict]:
            indices = global_batch_indices(batch_index(step, skip), cfg.batch.global_batch_size)
            return [lineage_record(datasets, i) for i in indices]

        yield Recomputed(meta, progress["step"], urls, records)


def _current_keys(config: dict, defaults: dict | None = None) -> dict:
    """A checkpoint's config with the settings added since it was written filled from today's defaults
    (they are new, so the run did not use them)."""
    if defaults is None:
        from conf import as_dict
        from trainer.config import load_trainer_config

        defaults = as_dict(load_trainer_config())
    merged = dict(defaults)
    for key, value in config.items():
        merged[key] = (_current_keys(value, defaults[key]) if isinstance(value, dict)
                       and isinstance(defaults.get(key), dict) else value)
    return merged


def step_documents(checkpoint: str | Path, step: int, cache_dir: str | None = None) -> list[dict]:
    """The samples of training step `step` (0-based) and the documents each drew from, recomputed."""
    checkpoint = str(checkpoint)
    with _recomputation(checkpoint, cache_dir) as batches:
        if not 0 <= step < batches.steps:
            raise CheckpointError(f"{checkpoint} was saved after step {batches.steps}: steps 0..{batches.steps - 1} "
                                  f"trained it, not {step}")
        records = batches.records(step)
        urls = batches.urls
    for record in records:
        record["urls"] = [urls.get(d, "") for d in record["doc_ids"]]
    return records


def _read_checkpoint(checkpoint: str, cache: Callable[[], str]) -> dict:
    if not is_uri(checkpoint):
        return read_checkpoint(Path(checkpoint))
    Path(cache()).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache(), prefix="provenance-") as folder:
        local = Path(folder) / checkpoint.rstrip("/").rsplit("/", 1)[-1]
        try:
            download_checkpoint(checkpoint.rstrip("/"), local)   # a step-N.pt object or a sharded step-N/ prefix
        except FileNotFoundError as exc:
            raise CheckpointError(f"no (whole) checkpoint at {checkpoint}") from exc
        return read_checkpoint(local)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="step-N/ (sharded) or step-N.pt (gathered): a path or a URI")
    parser.add_argument("--lineage", help="batches.jsonl (default: <run>/lineage/batches.jsonl)")
    parser.add_argument("--out", help="write one JSON line per document here (a path or a URI)")
    parser.add_argument("--step", type=int, help="only this training step (0-based): its samples and documents, "
                                                 "recomputed from the shards")
    parser.add_argument("-o", dest="overrides", action="append", default=[], metavar="paths.KEY=VALUE",
                        help="override conf/paths.yaml, e.g. paths.cache_dir=/scratch/cache")
    args = parser.parse_args(argv)
    try:
        other, path_overrides = split_paths_overrides(args.overrides)
        if other:
            raise ConfigError(f"-o {other[0]}: provenance reads only conf/paths.yaml; write paths.KEY=VALUE")
        cache_dir = load_paths(path_overrides).cache_dir
        if args.step is not None:
            records = step_documents(args.checkpoint, args.step, cache_dir)
            text = "".join(json.dumps(r) + "\n" for r in records)
            storage.write_text(args.out, text) if args.out else sys.stdout.write(text)
            return 0
        meta, seen = documents_seen(args.checkpoint, args.lineage, cache_dir)
    except (CheckpointError, ManifestError, ConfigError, OSError) as exc:
        print(f"trainer.provenance: {exc}", file=sys.stderr)
        return 2
    hosts = Counter(urlsplit(d.url).hostname or "?" for d in seen)
    print(f"{args.checkpoint} saw {len(seen)} documents from {len(hosts)} hosts "
          f"(manifest {meta['manifest_sha256'][:12]})")
    for host, n in hosts.most_common():
        print(f"  {n:6d}  {host}")
    if args.out:
        storage.write_text(args.out, "".join(json.dumps(d.__dict__) + "\n" for d in seen))
        print(f"documents: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
