"""Train the quality classifier, DCLM/GPT-3 style: `python -m jobs.quality.train_classifier`.

fastText (fasttext-numpy2) on reference text (positives, `__label__hq`: Wikipedia by default, any corpus given with
`--positives`) against random crawl (negatives, `__label__cc`: a seeded sample of `silver.documents`, or a JSONL
file/folder given with `--negatives`).  The classes are balanced (the larger side is sampled down), a seeded share of
each is held out, and the held-out precision, recall and F1 of the positive class at `threshold` are printed and kept
in `model.json` beside `model.bin` under `<lake>/models/quality_classifier` (DCLM's trainer settings: lr 0.1,
dim 100, word bigrams; 25 epochs instead of DCLM's 5, which under-train a corpus of thousands of documents).

A plain process like train_kenlm: fastText trains on one machine from one file, and a corpus that is a Delta table
is read with delta-rs, not Spark.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import storage
from conf.paths import is_uri, join
from jobs.quality.classifiers import (NEGATIVE, POSITIVE, QUALITY_META_FILE, QUALITY_MODEL_FILE, fasttext_line,
                                      positive_probabilities, quality_model_dir)
from jobs.quality.corpus import read_corpus, resolve_source, split_heldout, training_cli

log = logging.getLogger("weblm.jobs.quality.train_classifier")


def heldout_metrics(probs: list[float], truth: list[bool], threshold: float) -> dict:
    """Precision, recall and F1 of the positive class at `threshold` (scikit-learn's definitions)."""
    from sklearn.metrics import precision_recall_fscore_support, roc_auc_score

    predicted = [p >= threshold for p in probs]
    precision, recall, f1, _ = precision_recall_fscore_support(truth, predicted, average="binary", zero_division=0)
    auc = roc_auc_score(truth, probs) if len(set(truth)) == 2 else None
    return {"precision": round(float(precision), 4), "recall": round(float(recall), 4), "f1": round(float(f1), 4),
            "roc_auc": None if auc is None else round(float(auc), 4), "threshold": threshold,
            "positives": sum(truth), "negatives": len(truth) - sum(truth)}


def train(positives: list[str], negatives: list[str], dest: str, settings: dict, sources: dict) -> dict:
    """Balance, split, train, measure on the held-out part, publish `model.bin` + `model.json` at `dest`."""
    import fasttext

    started = time.monotonic()
    seed = int(settings["seed"])
    positives = [t for t in positives if fasttext_line(t)]
    negatives = [t for t in negatives if fasttext_line(t)]
    n = min(len(positives), len(negatives), int(settings["max_docs"]))
    if n < 4:
        raise ValueError(f"too few documents to train on: {len(positives)} positives, {len(negatives)} negatives "
                         "(at least 4 of each)")
    rng = random.Random(seed)
    positives, negatives = rng.sample(positives, n), rng.sample(negatives, n)
    fraction = float(settings["heldout_fraction"])
    pos_train, pos_held = split_heldout(positives, fraction, seed)
    neg_train, neg_held = split_heldout(negatives, fraction, seed + 1)
    examples = [f"{POSITIVE} {fasttext_line(t)}" for t in pos_train] + [f"{NEGATIVE} {fasttext_line(t)}" for t in neg_train]
    rng.shuffle(examples)
    with tempfile.TemporaryDirectory(prefix="quality-classifier-") as tmp:
        train_file = Path(tmp) / "train.txt"
        train_file.write_text("\n".join(examples) + "\n", encoding="utf-8")
        t0 = time.monotonic()
        try:
            model = fasttext.train_supervised(
                input=str(train_file), lr=float(settings["lr"]), dim=int(settings["dim"]), epoch=int(settings["epoch"]),
                wordNgrams=int(settings["word_ngrams"]), minCount=int(settings["min_count"]), bucket=int(settings["bucket"]),
                thread=int(settings["threads"]), seed=seed, verbose=0)
        except RuntimeError as exc:   # fastText diverges ("Encountered NaN") on a few tiny examples at a high rate
            raise ValueError(f"fastText training failed on {len(examples)} examples ({exc}): give more documents "
                             "or lower quality.scorers.quality_classifier.train.lr") from exc
        train_seconds = time.monotonic() - t0
        held = pos_held + neg_held
        truth = [True] * len(pos_held) + [False] * len(neg_held)
        t1 = time.monotonic()
        probs = positive_probabilities(model, held)
        predict_seconds = time.monotonic() - t1
        metrics = heldout_metrics(probs, truth, float(settings["threshold"]))
        model_file = Path(tmp) / QUALITY_MODEL_FILE
        model.save_model(str(model_file))
        meta = {"labels": {"positive": POSITIVE, "negative": NEGATIVE}, **sources,
                "train_docs_per_class": len(pos_train), "heldout": metrics,
                "settings": {k: settings[k] for k in ("lr", "dim", "epoch", "word_ngrams", "min_count", "bucket", "seed")},
                "seconds": {"train": round(train_seconds, 2), "total": round(time.monotonic() - started, 2)},
                "heldout_docs_per_s": round(len(held) / predict_seconds, 1) if predict_seconds else None,
                "sha256": storage.sha256(str(model_file)),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        (Path(tmp) / QUALITY_META_FILE).write_text(json.dumps(meta, indent=1))
        publish(Path(tmp), dest)
    return meta


def publish(folder: Path, dest: str) -> None:
    """model.bin first, model.json last: a reader that finds model.json finds the model it describes."""
    for name in (QUALITY_MODEL_FILE, QUALITY_META_FILE):
        target = join(dest, name)
        if is_uri(dest):
            storage.put_file(folder / name, target)
        else:
            os.makedirs(dest, exist_ok=True)
            shutil.copyfile(folder / name, f"{target}.tmp")
            os.replace(f"{target}.tmp", target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.quality.train_classifier", description=__doc__.split("\n")[0])
    parser.add_argument("--positives", help="reference text: a JSONL/text file or folder, or table:layer.name")
    parser.add_argument("--negatives", help="random crawl: table:silver.documents (default) or a JSONL/text file or folder")
    parser.add_argument("--language", help="only documents of this language (default: train.language)")
    parser.add_argument("--out", help="model folder (default: <model_dir or <lake>/models/quality_classifier>)")
    args, _, paths, section, settings = training_cli(parser, argv, "quality_classifier")
    language = args.language if args.language is not None else (settings.get("language") or None)
    sources = {side: resolve_source(getattr(args, side) or settings[side], paths) for side in ("positives", "negatives")}
    texts = {side: read_corpus(source, language=language, limit=int(settings["max_docs"]), seed=int(settings["seed"]),
                               paths=paths).texts for side, source in sources.items()}
    dest = args.out or quality_model_dir(section, paths)
    meta = train(texts["positives"], texts["negatives"], dest, settings, {**sources, "language": language or "any"})
    held = meta["heldout"]
    print(f"held-out: precision {held['precision']:.3f} recall {held['recall']:.3f} f1 {held['f1']:.3f} "
          f"(threshold {held['threshold']}, {held['positives']} positives, {held['negatives']} negatives)")
    print(json.dumps({"model": dest, **meta}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
