"""Text corpora for the quality models' training jobs (`train_kenlm`, `train_classifier`).

A corpus is named one of two ways:
- a path (local or URI): a file or a folder of `.jsonl`/`.json`/`.jsonl.gz`/`.json.gz` files (one JSON object
  per line with a `text` field, optionally `language`; dolma's and CCNet's dumps have this shape) and `.txt`/`.txt.gz`
  files (non-empty lines, paragraphs, grouped in order into documents of `txt_lines_per_doc` lines);
- a Delta table of the lake, `table:silver.documents` (any table with `doc_id` and `text` columns, optionally
  `language`), read with delta-rs on this machine: the crawl's own text, e.g. the negatives of the quality
  classifier.  A model trains on one machine from a sample, so no Spark session (and no JVM start) is needed to
  read it.  Where a language is asked for and a row's `language` is missing, null or `und` (silver.documents' own
  placeholder: language ID runs in the quality stage), fastText lid.176 decides.

Reading is deterministic (files in sorted order; a table's sample is the documents with the lowest seeded hash of
their `doc_id`), so a seeded sample is reproducible.
Lines that are not JSON or have no text are counted under `skipped`, never fatal.
"""
from __future__ import annotations

import gzip
import hashlib
import heapq
import io
import json
import logging
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import storage
from jobs.quality import langid

log = logging.getLogger("weblm.jobs.quality.corpus")

TABLE_PREFIX = "table:"
JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
TEXT_SUFFIXES = (".txt", ".txt.gz", ".raw", ".tokens")


@dataclass
class Corpus:
    """Documents read from one source, with what was skipped and why."""
    source: str
    texts: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    files: int = 0


def _open_text(path: str) -> io.TextIOBase:
    raw = storage.open_file(path, "rb")
    if path.endswith(".gz"):
        raw = gzip.GzipFile(fileobj=raw)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def _json_docs(path: str, language: str | None, corpus: Corpus) -> Iterator[str]:
    with _open_text(path) as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                corpus.skipped["bad_json"] += 1
                continue
            text = doc.get("text") if isinstance(doc, dict) else None
            if not isinstance(text, str) or not text.strip():
                corpus.skipped["no_text"] += 1
                continue
            doc_language = doc.get("language") or (doc.get("metadata") or {}).get("language")
            if language and doc_language and doc_language != language:
                corpus.skipped["other_language"] += 1
                continue
            yield text


def _txt_docs(path: str, lines_per_doc: int) -> Iterator[str]:
    """Non-empty lines (paragraphs) grouped, in order, into documents of `lines_per_doc` lines."""
    doc: list[str] = []
    with _open_text(path) as lines:
        for line in lines:
            if line.strip():
                doc.append(line.rstrip("\n"))
            if len(doc) >= lines_per_doc:
                yield "\n".join(doc)
                doc = []
        if doc:
            yield "\n".join(doc)


def _files(source: str) -> list[str]:
    if storage.isfile(source):
        return [source]
    if not storage.isdir(source):
        raise FileNotFoundError(f"corpus {source} does not exist: give a JSONL/text file, a folder of them, "
                                f"or {TABLE_PREFIX}<layer>.<table> for a Delta table of the lake")
    return [f for f in storage.walk_files(source) if f.endswith(JSON_SUFFIXES + TEXT_SUFFIXES)]


def _rank(seed: int, doc_id: str) -> int:
    """A document's place in the seeded random order of a table sample."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest(), "big")


def _table_docs(location: str, language: str | None, limit: int | None, seed: int, corpus: Corpus) -> list[str]:
    """The `limit` documents of the table with the lowest seeded rank (all of them without a limit), in rank order:
    one pass over the table's `doc_id` and `text` in Arrow batches, holding at most `limit` texts."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(location, storage_options=storage.object_store_options(location) or None)
    except TableNotFoundError as exc:
        raise FileNotFoundError(f"corpus table {location} does not exist (or is not a Delta table): run the "
                                "pipeline stage that writes it first") from exc
    dataset = table.to_pyarrow_dataset()
    has_language = "language" in dataset.schema.names
    wanted = pc.field("text").is_valid() & (pc.utf8_length(pc.field("text")) > 0)
    if language and has_language:   # "und" (silver.documents' placeholder before language ID) or null: detect
        wanted = wanted & ((pc.field("language") == language) | pc.field("language").is_null()
                           | (pc.field("language") == langid.UNKNOWN))
    columns = ["doc_id", "text"] + (["language"] if has_language else [])
    kept: list[tuple[int, str, str]] = []   # a max-heap by rank, as (-rank, doc_id, text)
    for batch in dataset.to_batches(columns=columns, filter=wanted):
        known = batch.column("language").to_pylist() if has_language else [None] * batch.num_rows
        for doc_id, text, given in zip(batch.column("doc_id").to_pylist(), batch.column("text").to_pylist(), known):
            rank = _rank(seed, doc_id)
            if limit and len(kept) >= limit and rank >= -kept[0][0]:
                continue
            if language and given != language and langid.identify([text])[0][0] != language:
                corpus.skipped["other_language"] += 1
                continue
            item = (-rank, doc_id, text)
            if limit and len(kept) >= limit:
                heapq.heapreplace(kept, item)
            else:
                heapq.heappush(kept, item)
    return [text for _, _, text in sorted(kept, reverse=True)]


def read_corpus(source: str, *, language: str | None = None, limit: int | None = None, seed: int = 0,
                txt_lines_per_doc: int = 20, paths=None) -> Corpus:
    """Up to `limit` documents of `source` (a path or `table:layer.name`); a random sample of them when capped."""
    corpus = Corpus(source=source)
    if source.startswith(TABLE_PREFIX):
        if paths is None:
            raise ValueError(f"corpus {source} is a Delta table of the lake: it needs the loaded paths")
        corpus.texts = _table_docs(paths.table(source[len(TABLE_PREFIX):]), language, limit, seed, corpus)
        corpus.files = 1
    else:
        corpus.texts = _path_docs(source, language, limit, seed, txt_lines_per_doc, corpus)
    if corpus.skipped:
        log.warning("corpus %s: skipped %s", source, dict(corpus.skipped))
    return corpus


def _path_docs(source: str, language: str | None, limit: int | None, seed: int, lines_per_doc: int,
               corpus: Corpus) -> list[str]:
    texts: list[str] = []
    for path in sorted(_files(source)):
        corpus.files += 1
        if path.endswith(JSON_SUFFIXES):
            texts.extend(_json_docs(path, language, corpus))
        else:
            texts.extend(_txt_docs(path, lines_per_doc))
    if limit and len(texts) > limit:
        texts = random.Random(seed).sample(texts, limit)
    return texts


def split_heldout(texts: list[str], heldout_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """`(train, heldout)`: a seeded shuffle, then the last `heldout_fraction` of it held out (at least one each)."""
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    n_held = min(max(1, round(len(texts) * heldout_fraction)), len(texts) - 1) if len(texts) > 1 else 0
    held = set(order[len(order) - n_held:])
    return ([t for i, t in enumerate(texts) if i not in held], [t for i, t in enumerate(texts) if i in held])


def training_cli(parser, argv, scorer: str):
    """The training jobs' shared start: `-o`/`--root` parsed, conf loaded.

    Returns `(args, cfg, paths, section, settings)`: `section` is `quality.scorers.<scorer>`, `settings` its `train`.
    """
    from conf import split_paths_overrides
    from conf.paths import load_paths
    from jobs.config import load_jobs_config

    parser.add_argument("--root", help="folder relative paths are relative to (default: $WEBLM_ROOT or the checkout)")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help=f"conf/jobs.yaml override, e.g. -o quality.scorers.{scorer}.train.seed=1; "
                             "paths.KEY=VALUE overrides conf/paths.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    job_overrides, path_overrides = split_paths_overrides(args.override)
    cfg = load_jobs_config(job_overrides)
    paths = load_paths(path_overrides, root=args.root)
    section = dict((cfg.quality.scorers or {}).get(scorer) or {})
    settings = dict(section.get("train") or {})
    if not settings:
        raise SystemExit(f"conf/jobs.yaml has no quality.scorers.{scorer}.train section")
    return args, cfg, paths, section, settings


def resolve_source(source: str, paths) -> str:
    """A corpus named in conf or on the command line: tables and URIs as they are, paths relative to the root."""
    from conf.paths import is_uri

    return source if source.startswith(TABLE_PREFIX) or is_uri(source) else os.path.join(paths.root, source)
