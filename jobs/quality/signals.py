"""Every signal of a batch of documents, as columns: language ID, heuristics, PII counts, model scorers.

Pure per-document work (no Spark): `score_texts` is what the job runs on each Arrow batch and what
bench/quality_overhead.py runs in one process.  Language ID runs first so scorers get the languages.

Each row says what its values were made under, per group: `signals_sha256` for language ID, heuristics and
PII (`signals_settings`), and `<scorer>_sha256` for each enabled scorer (its settings and model identity,
`scorer_dependencies`).  `rescore` recomputes only a row's stale groups: a new, re-configured or retrained scorer
costs that scorer's time, not Gopher's; a row whose base group is stale is scored whole (its language may move).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Iterator

from jobs.quality import heuristics, langid, pii
from jobs.quality.scorers import LoadedScorers, enabled_scorers, scorer_columns, scorer_identity

KEY_COLUMNS = {"doc_id": "string", "content_sha256": "string", "signals_sha256": "string"}
LANGUAGE_COLUMNS = {"language": "string", "language_score": "double"}
SIGNATURE_VERSION = 2   # bump when a formula changes: every stored signal is then recomputed (2: a hash per scorer)


def state_column(scorer: str) -> str:
    """The column holding the hash of the settings and model that a row's `scorer` values were made under."""
    return f"{scorer}_sha256"


def state_columns(columns) -> list[str]:
    """The hash columns among a signals table's `columns` (what the filter view leaves out)."""
    return [c for c in columns if c != "content_sha256" and c.endswith("_sha256")]


def signal_columns(scorer_settings: dict | None = None) -> dict[str, str]:
    """Signal column -> Spark SQL type, in table order (keys and hash columns excluded)."""
    return {**LANGUAGE_COLUMNS, **heuristics.COLUMNS, **pii.COLUMNS,
            **scorer_columns(enabled_scorers(scorer_settings or {}))}


def table_columns(scorer_settings: dict | None = None) -> dict[str, str]:
    """Every silver.signals column -> Spark SQL type, in table order: keys, signals, each scorer's hash last."""
    names = enabled_scorers(scorer_settings or {})
    base, scored = signal_columns(), scorer_columns(names)
    hashes = {state_column(name): "string" for name in names}
    clashes = set(scored) & (set(KEY_COLUMNS) | set(base) | set(hashes))
    if clashes:
        raise ValueError(f"a scorer writes a column the table keeps for keys, base signals or hashes: "
                         f"{sorted(clashes)}")
    return {**KEY_COLUMNS, **base, **scored, **hashes}


def table_schema(scorer_settings: dict | None = None) -> str:
    """The silver.signals schema as a Spark DDL string."""
    return ", ".join(f"`{name}` {sql_type}" for name, sql_type in table_columns(scorer_settings).items())


ARROW_TYPES = {"string": "string", "double": "float64", "float": "float32", "int": "int32", "bigint": "int64",
               "long": "int64", "boolean": "bool"}


def arrow_schema(scorer_settings: dict | None = None):
    """The silver.signals schema in Arrow (built without a Spark session: it runs on the workers)."""
    import pyarrow as pa

    columns = table_columns(scorer_settings)
    unknown = {c: t for c, t in columns.items() if t not in ARROW_TYPES}
    if unknown:
        raise ValueError(f"signal columns with types a scorer may not use: {unknown}; use one of {sorted(ARROW_TYPES)}")
    return pa.schema([(name, getattr(pa, ARROW_TYPES[t])()) for name, t in columns.items()])


def signals_settings(params: heuristics.SignalParams) -> dict[str, Any]:
    """What the base group (language ID, heuristics, PII) depends on: rows made under others are stale."""
    return {"version": SIGNATURE_VERSION, "signals": asdict(params)}


def scorer_dependencies(scorer_settings: dict | None, paths) -> dict[str, dict[str, Any]]:
    """What each enabled scorer's columns depend on: its conf section and the model it would load (driver side)."""
    sections = scorer_settings or {}
    return {name: {"version": SIGNATURE_VERSION, "settings": sections[name],
                   "model": scorer_identity(name, sections[name], paths)}
            for name in enabled_scorers(sections)}


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


def worker_scorers(scorer_settings: dict, paths, scorer_shas: dict[str, str] | None = None) -> LoadedScorers:
    """This Python worker's scorers, loaded once per worker, settings and models (Spark reuses workers across
    tasks and jobs: a model retrained since has other hashes in `scorer_shas`, so it is loaded again)."""
    import json

    key = json.dumps([scorer_settings, scorer_shas], sort_keys=True, default=str)
    if key not in _WORKER_SCORERS:
        _WORKER_SCORERS[key] = LoadedScorers(scorer_settings, paths)
    return _WORKER_SCORERS[key]


def rescore(texts: list[str | None], stored: dict[str, list], params: heuristics.SignalParams,
            scorers: LoadedScorers | None, base_sha: str, scorer_shas: dict[str, str]) -> dict[str, list]:
    """Every signal and hash column for `texts`, from the `stored` values (None where never scored): a row's
    base group is recomputed when its `signals_sha256` is not `base_sha` (and then every scorer too, on the new
    language), a scorer's columns when its hash column is not `scorer_shas[name]`; the rest is kept."""
    n = len(texts)
    out = {column: list(values) for column, values in stored.items()}
    base = [i for i in range(n) if stored["signals_sha256"][i] != base_sha]
    if base:
        fresh = score_texts([texts[i] for i in base], params)
        for column, values in {**fresh, "signals_sha256": [base_sha] * len(base)}.items():
            for i, value in zip(base, values):
                out[column][i] = value
    stale_base = set(base)
    for name in (scorers.names() if scorers is not None else []):
        state, sha = state_column(name), scorer_shas[name]
        rows = [i for i in range(n) if i in stale_base or stored[state][i] != sha]
        if not rows:
            continue
        values = scorers.score_with(name, [texts[i] or "" for i in rows], [out["language"][i] for i in rows])
        for column, column_values in {**values, state: [sha] * len(rows)}.items():
            for i, value in zip(rows, column_values):
                out[column][i] = value
    return out


def arrow_batches(batches: Iterator, params: heuristics.SignalParams, scorer_settings: dict, paths,
                  base_sha: str, scorer_shas: dict[str, str]) -> Iterator:
    """`mapInArrow` body: (doc_id, text, content_sha256, every other silver.signals column as stored, null where
    never scored) batches in, silver.signals batches out, only the stale groups recomputed (`rescore`)."""
    import pyarrow as pa

    schema = arrow_schema(scorer_settings)
    scorers = worker_scorers(scorer_settings, paths, scorer_shas) if enabled_scorers(scorer_settings) else None
    carried = [f.name for f in schema if f.name not in ("doc_id", "content_sha256")]
    for batch in batches:
        if batch.num_rows == 0:
            continue
        stored = {column: batch.column(column).to_pylist() for column in carried}
        columns = rescore(batch.column("text").to_pylist(), stored, params, scorers, base_sha, scorer_shas)
        yield pa.RecordBatch.from_arrays(
            [batch.column(f.name) if f.name in ("doc_id", "content_sha256") else pa.array(columns[f.name], type=f.type)
             for f in schema], schema=schema)


def redact_batches(batches: Iterator) -> Iterator:
    """`mapInArrow` body: (doc_id, text) in, (doc_id, text with PII placeholders) out."""
    import pyarrow as pa

    for batch in batches:
        texts = [pii.redact(t)[0] for t in batch.column("text").to_pylist()]
        yield pa.RecordBatch.from_arrays([batch.column("doc_id"), pa.array(texts, type=pa.string())],
                                         names=["doc_id", "text"])
