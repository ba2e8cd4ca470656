"""Train one language's perplexity model, CCNet's recipe: `python -m jobs.quality.train_kenlm --language en`.

normalize (jobs/quality/perplexity.py) -> a SentencePiece model trained on the normalized reference corpus (CCNet
trains one per language) -> the corpus as pieces -> KenLM's own `lmplz -o 5` -> `build_binary` -> the head/tail
cut-offs: the 30th and 60th percentiles of the perplexities of a crawl sample (`--cutoff-corpus`, e.g.
`table:silver.documents`), or of held-out reference documents when no crawl is given.  Writes
`<lake>/models/kenlm/<language>/{sp.model, lm.binary, model.json}` all at once (a half-written model is never seen).

A plain process, not a Spark job: lmplz is one external program over one stream of text, and a reference corpus is
a Wikipedia-sized sample (CCNet: 1M documents) that one machine reads in seconds; a corpus given as a Delta table
is read with delta-rs (jobs/quality/corpus.py), with no Spark session.  The corpus: `--corpus PATH|table:layer.name`,
default `quality.scorers.perplexity.train.corpus` (../shared/data/text/wiki_text when present).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import storage
from conf.paths import is_uri, join
from jobs.quality import perplexity as ppl
from jobs.quality.corpus import read_corpus, resolve_source, split_heldout, training_cli

log = logging.getLogger("weblm.jobs.quality.train_kenlm")


def find_tool(name: str, tools_dir: str = "") -> str:
    """`lmplz`/`build_binary`: in `tools_dir`, else beside this Python (the venv's bin, where `make kenlm` puts
    them), else on PATH."""
    for folder in filter(None, [tools_dir, os.path.dirname(sys.executable)]):
        candidate = os.path.join(folder, name)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"KenLM's {name} is not installed: run `make kenlm` (part of `make setup`; it builds "
                                "lmplz and build_binary from the kenlm sdist into .venv/bin)")
    return found


def normalized_lines(texts: list[str]) -> list[str]:
    """Every non-empty normalized line of every document (CCNet scores and trains line by line)."""
    return [line for text in texts for line in map(ppl.normalize, text.split("\n")) if line]


def train_sentencepiece(lines: list[str], folder: Path, settings: dict) -> Path:
    import sentencepiece as spm

    corpus = folder / "sp-train.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    prefix = folder / "sp"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=int(settings["vocab_size"]),
        model_type=settings["sp_model_type"], character_coverage=float(settings["character_coverage"]),
        hard_vocab_limit=False,            # a small corpus gets a smaller vocabulary instead of an error
        input_sentence_size=int(settings["sp_max_lines"]), shuffle_input_sentence=True,
        num_threads=int(settings["threads"]), minloglevel=2)
    corpus.unlink()
    prefix.with_suffix(".vocab").unlink(missing_ok=True)   # the pieces are inside sp.model too
    return prefix.with_suffix(".model")


def run_lmplz(pieces: list[str], folder: Path, settings: dict) -> tuple[Path, str]:
    """ARPA from lmplz over the piece lines (stdin), then build_binary; returns (binary, lmplz's stderr tail)."""
    lmplz, build_binary = find_tool("lmplz", settings["tools_dir"]), find_tool("build_binary", settings["tools_dir"])
    arpa, binary = folder / "lm.arpa", folder / ppl.LM_FILE
    cmd = [lmplz, "-o", str(settings["order"]), "-S", str(settings["memory"]), "-T", str(folder),
           "--discount_fallback"]       # tiny corpora lack the n-gram counts-of-counts modified Kneser-Ney needs
    if settings.get("prune"):
        cmd += ["--prune", *map(str, settings["prune"])]
    with open(arpa, "wb") as out:
        proc = subprocess.run(cmd, input="\n".join(pieces).encode("utf-8") + b"\n", stdout=out,
                              stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError(f"lmplz failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[-2000:]}")
    built = subprocess.run([build_binary, str(arpa), str(binary)], capture_output=True)
    if built.returncode != 0:
        raise RuntimeError(f"build_binary failed ({built.returncode}): {built.stderr.decode(errors='replace')[-2000:]}")
    arpa.unlink()
    return binary, proc.stderr.decode(errors="replace")[-500:]


def cutoffs(model: ppl.LanguageModel, texts: list[str], percentiles: tuple[float, float],
            per_line: bool) -> dict:
    values = [v for v in (model.score(t, per_line) for t in texts) if v is not None]
    if not values:
        raise ValueError("no document of the cut-off corpus could be scored: give a --cutoff-corpus with text")
    head, tail = np.percentile(values, list(percentiles))
    return {"head": round(float(head), 1), "tail": round(float(tail), 1), "percentiles": list(percentiles),
            "documents": len(values), "median": round(float(np.median(values)), 1)}


def publish(folder: Path, dest: str) -> None:
    """Put the finished model folder at `dest` in one step (local: a rename; URI: copied, model.json last)."""
    if is_uri(dest):
        for name in (ppl.SP_FILE, ppl.LM_FILE, ppl.META_FILE):
            storage.put_file(folder / name, join(dest, name))
        return
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    staging = f"{dest}.tmp-{os.getpid()}"
    shutil.copytree(folder, staging)
    old = f"{dest}.old-{os.getpid()}"
    if os.path.isdir(dest):
        os.replace(dest, old)
    os.replace(staging, dest)
    shutil.rmtree(old, ignore_errors=True)


def train(language: str, corpus_source: str, dest: str, settings: dict, *, cutoff_source: str | None = None,
          paths=None) -> dict:
    """Train and publish one language's model; returns what model.json records."""
    started = time.monotonic()
    corpus = read_corpus(corpus_source, language=language, limit=int(settings["max_docs"]), seed=int(settings["seed"]),
                         paths=paths)
    if len(corpus.texts) < 2:
        raise ValueError(f"corpus {corpus_source} has {len(corpus.texts)} {language} documents: too few to train on")
    if cutoff_source:
        train_docs = corpus.texts
        cut_docs = read_corpus(cutoff_source, language=language, limit=int(settings["cutoff_docs"]),
                               seed=int(settings["seed"]), paths=paths).texts
    else:
        train_docs, cut_docs = split_heldout(corpus.texts, float(settings["heldout_fraction"]), int(settings["seed"]))
    lines = normalized_lines(train_docs)
    log.info("%s: %d documents, %d lines from %s", language, len(train_docs), len(lines), corpus_source)
    with tempfile.TemporaryDirectory(prefix=f"kenlm-{language}-") as tmp:
        folder = Path(tmp)
        t0 = time.monotonic()
        sp_path = train_sentencepiece(lines, folder, settings)
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=str(sp_path))
        pieces = [" ".join(p) for p in sp.encode(lines, out_type=str)]
        t1 = time.monotonic()
        _, lmplz_log = run_lmplz(pieces, folder, settings)
        t2 = time.monotonic()
        import kenlm
        model = ppl.LanguageModel(language, sp, kenlm.Model(str(folder / ppl.LM_FILE)), None, {})
        per_line = bool(settings.get("per_line", False))
        cut = cutoffs(model, cut_docs, tuple(settings["percentiles"]), per_line)
        cut["source"] = cutoff_source or f"held-out {corpus_source}"
        meta = {
            "language": language, "corpus": corpus_source, "documents": len(train_docs), "lines": len(lines),
            "tokens": sum(p.count(" ") + 1 for p in pieces), "sp_vocab_size": sp.get_piece_size(),
            "order": int(settings["order"]), "per_line": per_line, "cutoffs": cut,
            "seconds": {"sentencepiece": round(t1 - t0, 2), "lmplz_build_binary": round(t2 - t1, 2),
                        "cutoffs": round(time.monotonic() - t2, 2), "total": round(time.monotonic() - started, 2)},
            "skipped": dict(corpus.skipped), "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "training_id": uuid.uuid4().hex,   # each training is a new model identity: the quality job rescores with it
        }
        (folder / ppl.META_FILE).write_text(json.dumps(meta, indent=1))
        publish(folder, dest)
    log.info("lmplz: %s", lmplz_log.strip().splitlines()[-1] if lmplz_log.strip() else "")
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.quality.train_kenlm", description=__doc__.split("\n")[0])
    parser.add_argument("--language", default=None, help="language code of the corpus (default: train.language)")
    parser.add_argument("--corpus", help="reference text: a JSONL/text file or folder, or table:layer.name "
                        "(default: quality.scorers.perplexity.train.corpus)")
    parser.add_argument("--cutoff-corpus", help="crawl text whose perplexity percentiles set the buckets "
                        "(e.g. table:silver.documents); default: held-out reference documents")
    parser.add_argument("--out", help="model folder (default: <model_dir or <lake>/models/kenlm>/<language>)")
    args, _, paths, section, settings = training_cli(parser, argv, "perplexity")
    settings["per_line"] = section.get("per_line", False)
    language = args.language or settings["language"]
    corpus = resolve_source(args.corpus or settings["corpus"], paths)
    cutoff = resolve_source(args.cutoff_corpus, paths) if args.cutoff_corpus else None
    dest = args.out or join(ppl.models_root(section, paths), language)
    meta = train(language, corpus, dest, settings, cutoff_source=cutoff, paths=paths)
    print(json.dumps({"model": dest, **meta}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
