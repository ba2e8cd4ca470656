"""`{"id": ..., "text": ...}` JSON lines as a scratch lake's `silver.documents`: what the commands over plain files
(`jobs.quality_files`, `jobs.dedup_files`) run the pipeline's own jobs on."""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def read_jsonl(path: str) -> list[dict]:
    """The documents of a JSON-lines file, as {doc_id, text}; a line that is not one stops the command, saying
    which (the commands write one line per input document)."""
    docs, seen = [], set()
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SystemExit(f"{path}:{n}: not UTF-8 ({exc.reason} at byte {exc.start} of the line)") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{n}: not a JSON line ({exc})") from None
            if not isinstance(row, dict) or "id" not in row or "text" not in row:
                found = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise SystemExit(f"{path}:{n}: each line needs 'id' and 'text'; this one has {found}")
            if row["text"] is not None and not isinstance(row["text"], str):
                raise SystemExit(f"{path}:{n}: 'text' must be a string, not {type(row['text']).__name__}")
            try:
                (row["text"] or "").encode("utf-8")
            except UnicodeEncodeError as exc:   # JSON's \ud800 escapes: no UTF-8 (nor Arrow, nor Spark) can hold one
                raise SystemExit(f"{path}:{n}: 'text' holds a lone surrogate ({exc.object[exc.start]!r} at "
                                 f"character {exc.start}): not text") from None
            doc_id = str(row["id"])
            if doc_id in seen:
                raise SystemExit(f"{path}:{n}: id {doc_id!r} appears twice; ids must be unique")
            seen.add(doc_id)
            docs.append({"doc_id": doc_id, "text": row["text"] or ""})
    return docs


def write_documents(spark, docs: list[dict], path: str) -> None:
    """The documents as the extract stage writes `silver.documents`: only doc_id and text are known (no URL, fetch
    time or WARC record); content_sha256 as extract computes it (Spark's sha2 of the UTF-8 text)."""
    import pyarrow as pa

    n = len(docs)
    none = pa.nulls(n, pa.string())
    table = pa.table({
        "doc_id": pa.array([d["doc_id"] for d in docs], pa.string()), "url": none, "host": none,
        "fetch_time": pa.nulls(n, pa.timestamp("us", tz="UTC")), "title": none,
        "text": pa.array([d["text"] for d in docs], pa.string()), "language": none,
        "n_chars": pa.array([len(d["text"]) for d in docs], pa.int32()), "warc_file": none,
        "warc_offset": pa.nulls(n, pa.int64()),
        "content_sha256": pa.array([hashlib.sha256(d["text"].encode("utf-8")).hexdigest() for d in docs],
                                   pa.string())})
    spark.createDataFrame(table.to_pandas()).repartition(max(1, min(64, n // 5000 + 2))) \
        .write.format("delta").mode("overwrite").save(path)


def command_parser(prog: str, doc: str, example: str) -> argparse.ArgumentParser:
    """The arguments every command over a JSONL file takes: IN.jsonl OUT_DIR [-o KEY=VALUE] [--master] [--keep-lake]."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    parser.add_argument("input", help="JSONL of {id, text}")
    parser.add_argument("out_dir")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a conf/jobs.yaml setting, e.g. -o {example}")
    parser.add_argument("--master", help="Spark master (default: conf/jobs.yaml spark.master)")
    parser.add_argument("--keep-lake", action="store_true", help="keep the scratch lake in OUT_DIR/lake")
    return parser


@contextmanager
def scratch_lake(out: Path, keep: bool, cfg, master: str | None, name: str, reuse: bool = False):
    """(Spark session, paths, lake folder) over a lake of its own: OUT_DIR/lake when `keep` (emptied first unless
    `reuse`), else a temporary folder, removed at the end."""
    from conf.paths import load_paths
    from jobs.base import build_session

    lake = out / "lake" if keep else Path(tempfile.mkdtemp(prefix=f"weblm-{name}-"))
    if keep and not reuse:
        shutil.rmtree(lake, ignore_errors=True)
    paths = load_paths([f"lake={lake}"])
    spark, created = build_session(cfg, paths, master, f"weblm-{name}-files")
    try:
        yield spark, paths, lake
    finally:
        if created:
            spark.stop()
        if not keep:
            shutil.rmtree(lake, ignore_errors=True)
