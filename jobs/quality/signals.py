"""Every signal of a batch of documents, as columns: language ID, heuristics, PII counts, model scorers.

Pure per-document work (no Spark): `score_texts` is what the job runs on each Arrow batch and what
bench/quality_overhead.py runs in one process.  Language ID runs first so scorers get the languages.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Iterator

from jobs.quality import heuristics, langid, pii
from jobs.quality.scorers import LoadedScorers, enabled_scorers, scorer_columns

KEY_COLUMNS = {"doc_id": "string", "content_sha256": "string", "signals_sha256": "string"}
LANGUAGE_COLUMNS = {"language": "string", "language_score": "double"}
SIGNATURE_VERSION = 1   # bump when a signal's formula changes: every stored signal is then recomputed


def signal_columns(scorer_settings: dict | None = None) -> dict[str, str]:
    """Signal column -> Spark SQL type, in table order (keys excluded)."""
    return {**LANGUAGE_COLUMNS, **heuristics.COLUMNS, **pii.COLUMNS,
            **scorer_columns(enabled_scorers(scorer_settings or {}))}


def table_schema(scorer_settings: dict | None = None) -> str:
    """The silver.signals schema as a Spark DDL string."""
    columns = {**KEY_COLUMNS, **signal_columns(scorer_settings)}
    return ", ".join(f"`{name}` {sql_type}" for name, sql_type in columns.items())


ARROW_TYPES = {"string": "string", "double": "float64", "float": "float32", "int": "int32", "bigint": "int64",
               "long": "int64", "boolean": "bool"}


def arrow_schema(scorer_settings: dict | None = None):
    """The silver.signals schema in Arrow (built without a Spark session: it runs on the workers)."""
    import pyarrow as pa

    columns = {**KEY_COLUMNS, **signal_columns(scorer_settings)}
    unknown = {c: t for c, t in columns.items() if t not in ARROW_TYPES}
    if unknown:
        raise ValueError(f"signal columns with types a scorer may not use: {unknown}; use one of {sorted(ARROW_TYPES)}")
    return pa.schema([(name, getattr(pa, ARROW_TYPES[t])()) for name, t in columns.items()])


def signals_settings(params: heuristics.SignalParams, scorer_settings: dict | None) -> dict[str, Any]:
    """What the stored signals depend on: their hash marks rows made under other settings as stale."""
    enabled = enabled_scorers(scorer_settings or {})
    return {"version": SIGNATURE_VERSION, "signals": asdict(params),
            "scorers": {name: (scorer_settings or {})[name] for name in enabled}}


def score_texts(texts: list[str | None], params: heuristics.SignalParams,
                scorers: LoadedScorers | None = None) -> dict[str, list]:
    """Column -> one value per text, for every signal column (scorers' too when given)."""
    texts = [t or "" for t in texts]
    languages, scores = langid.identify(texts)
    out: dict[str, list] = {"language": languages, "language_score": scores}
    rows = [{**heuristics.signals(t, params), **pii.counts(t)} for t in texts]
    for column in (*heuristics.COLUMNS, *pii.COLUMNS):
        out[column] = [row[column] for row in rows]
    if scorers is not None:
        out.update(scorers.score(texts, languages))
    return out


_WORKER_SCORERS: dict[str, LoadedScorers] = {}


def worker_scorers(scorer_settings: dict, paths) -> LoadedScorers:
    """This Python worker's scorers, loaded once per worker and settings (Spark reuses workers across tasks)."""
    import json

    key = json.dumps(scorer_settings, sort_keys=True, default=str)
    if key not in _WORKER_SCORERS:
        _WORKER_SCORERS[key] = LoadedScorers(scorer_settings, paths)
    return _WORKER_SCORERS[key]


def arrow_batches(batches: Iterator, params: heuristics.SignalParams, scorer_settings: dict, paths,
                  settings_sha: str) -> Iterator:
    """`mapInArrow` body: (doc_id, text, content_sha256) batches in, silver.signals batches out."""
    import pyarrow as pa

    schema = arrow_schema(scorer_settings)
    scorers = worker_scorers(scorer_settings, paths) if enabled_scorers(scorer_settings) else None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        texts = batch.column("text").to_pylist()
        columns = score_texts(texts, params, scorers)
        columns["doc_id"] = batch.column("doc_id")
        columns["content_sha256"] = batch.column("content_sha256")
        columns["signals_sha256"] = [settings_sha] * batch.num_rows
        yield pa.RecordBatch.from_arrays([pa.array(columns[f.name], type=f.type) if not isinstance(
            columns[f.name], (pa.Array, pa.ChunkedArray)) else columns[f.name] for f in schema], schema=schema)


def redact_batches(batches: Iterator) -> Iterator:
    """`mapInArrow` body: (doc_id, text) in, (doc_id, text with PII placeholders) out."""
    import pyarrow as pa

    for batch in batches:
        texts = [pii.redact(t)[0] for t in batch.column("text").to_pylist()]
        yield pa.RecordBatch.from_arrays([batch.column("doc_id"), pa.array(texts, type=pa.string())],
                                         names=["doc_id", "text"])
