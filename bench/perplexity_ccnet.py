"""Our CCNet-recipe perplexities against CCNet's own, what limits the agreement, and the scorer's speed.

    .venv/bin/python bench/perplexity_ccnet.py [--corpus DIR] [--model DIR] [--repeat 20] [--sweep]

Trains an English model with `jobs.quality.train_kenlm.train` on the reference corpus (default: conf's
quality.scorers.perplexity.train settings and corpus; `--model DIR` reuses a trained one), scores the 30 Common Crawl
documents of ../shared/data/text/cc_text_samples (dolma's test data: CC-MAIN-2020-16 WET text with CCNet's
`metadata.perplexity`, English, all in CCNet's head bucket), and prints the Spearman rank correlation of our
perplexities with CCNet's, with a bootstrap 95 % interval, the document as one sentence (what cc_net's mine.py
computes: its normalization deletes the newlines before SentencePiece) and line by line.  Only the documents whose
`text` is as long as CCNet's `metadata.length` carry the text CCNet scored: in dolma's two `cc_en_head-*` files the
text is a cut-down copy (a share of the lines), so CCNet's number describes other text; the correlation is printed
over those documents and over all 30.  CCNet's English model was trained on 1M Wikipedia openings with a 65k
SentencePiece vocabulary; ours on whatever --corpus holds.  `--sweep` shows what corpus size does: models trained on
1/8, 1/4, 1/2 and all of the corpus, each against CCNet, and the agreement of two models trained on disjoint halves
of the same size, over real web pages (WCXB's labelled main text, ../shared/data/extraction/wcxb_dev) and over
CCNet's documents: the ceiling any model of that size reaches on them.  The head/middle/tail cut-offs come from the
WCXB pages' perplexities, as CCNet's came from Common Crawl: the bucket counts say how many of CCNet's head documents
our model also puts in the head (30 % by chance).  Speed: documents/s of the whole scorer (normalize + SentencePiece +
KenLM) against KenLM's query alone over the same documents already normalized and cut into pieces (the baseline,
same process).  Skips (exit 0) when ../shared/data is absent.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "text"
sys.path.insert(0, str(ROOT))


def ccnet_documents() -> list[dict]:
    docs = []
    for path in sorted((DATA / "cc_text_samples").glob("*.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                doc = json.loads(line)
                meta = doc.get("metadata") or {}
                if meta.get("perplexity") is not None and doc.get("text"):
                    docs.append({"text": doc["text"], "ccnet": float(meta["perplexity"]), "file": path.name,
                                 "same_text": len(doc["text"]) == meta.get("length")})
    return docs


def web_pages() -> list[str]:
    """WCXB's hand-labelled main text of real web pages (empty when absent)."""
    pages = sorted((DATA.parent / "extraction" / "wcxb_dev" / "dev" / "ground-truth").glob("*.json"))
    texts = [(json.loads(p.read_text()).get("ground_truth") or {}).get("main_content") or "" for p in pages]
    return [t for t in texts if t.strip()]


def write_jsonl(texts: list[str], path: Path) -> str:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return str(path)


def rho_with_interval(ours: list, theirs: list, resamples: int = 2000, seed: int = 0) -> str:
    """Spearman's rho and a percentile bootstrap 95 % interval over documents."""
    import numpy as np
    from scipy.stats import spearmanr

    rho = spearmanr(ours, theirs)[0]
    rng, n, ours, theirs = np.random.default_rng(seed), len(ours), np.asarray(ours), np.asarray(theirs)
    boot = []
    for _ in range(resamples):
        pick = rng.integers(0, n, n)
        if len(set(pick)) > 2:
            boot.append(spearmanr(ours[pick], theirs[pick])[0])
    low, high = np.nanpercentile(boot, [2.5, 97.5])
    return f"{rho:+.3f} [{low:+.2f}, {high:+.2f}]"


def against_ccnet(model, docs: list[dict], per_line: bool = False) -> str:
    ours = [model.score(d["text"], per_line) for d in docs]
    same = [i for i, d in enumerate(docs) if d["same_text"]]
    return (f"{len(same)} with CCNet's text: rho {rho_with_interval([ours[i] for i in same], [docs[i]['ccnet'] for i in same])}; "
            f"all {len(docs)}: rho {rho_with_interval(ours, [d['ccnet'] for d in docs])}")


def sweep(corpus: str, settings: dict, docs: list[dict], web: list[str], cutoff: str, folder: Path) -> None:
    """rho against CCNet and split-half agreement as the reference corpus grows."""
    import random

    from scipy.stats import spearmanr

    from jobs.quality import perplexity as ppl
    from jobs.quality.corpus import read_corpus
    from jobs.quality.train_kenlm import train

    texts = read_corpus(corpus, language="en").texts
    random.Random(0).shuffle(texts)
    same = [d for d in docs if d["same_text"]]

    def model(part: list[str], name: str):
        out = folder / name
        meta = train("en", write_jsonl(part, folder / f"{name}.jsonl"), str(out), settings, cutoff_source=cutoff)
        return ppl.load_language_model(out, "en"), meta

    print(f"sweep over {corpus} ({len(texts)} documents, shuffled with seed 0); the document as one sentence:")
    for share in (0.125, 0.25, 0.5, 1.0):
        n = max(2, int(len(texts) * share))
        a, meta = model(texts[:n], f"a{n}")
        line = f"  {n:4d} docs, {meta['tokens']:>9,} pieces: vs CCNet {against_ccnet(a, docs)}"
        if 2 * n <= len(texts):
            b, _ = model(texts[n:2 * n], f"b{n}")
            on_web = spearmanr([a.score(t) for t in web], [b.score(t) for t in web])[0] if web else float("nan")
            on_cc = spearmanr([a.score(d["text"]) for d in same], [b.score(d["text"]) for d in same])[0]
            line += f"; two disjoint {n}-doc models agree: rho {on_web:+.3f} on {len(web)} web pages, {on_cc:+.3f} on CCNet's {len(same)}"
        print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="reference text (default: quality.scorers.perplexity.train.corpus)")
    parser.add_argument("--model", help="a trained model folder (skips training)")
    parser.add_argument("--repeat", type=int, default=20, help="passes over the documents for the speed figure")
    parser.add_argument("--sweep", action="store_true", help="rho and split-half agreement against corpus size")
    args = parser.parse_args()
    if not (DATA / "cc_text_samples").is_dir():
        print(f"skipped: {DATA / 'cc_text_samples'} is absent")
        return 0
    from jobs.config import load_jobs_config
    from jobs.quality import perplexity as ppl
    from jobs.quality.train_kenlm import train

    docs, web = ccnet_documents(), web_pages()
    cut = [d for d in docs if not d["same_text"]]
    print(f"{len(docs)} CCNet documents; {len(docs) - len(cut)} carry the text CCNet scored; {len(cut)} "
          f"({', '.join(sorted({d['file'] for d in cut}))}) are cut-down copies")
    section = load_jobs_config([]).quality.scorers["perplexity"]
    settings = {**section["train"], "per_line": section.get("per_line", False)}
    corpus = args.corpus or str(ROOT / settings["corpus"])
    with tempfile.TemporaryDirectory(prefix="bench-kenlm-") as tmp:
        cutoff = write_jsonl(web, Path(tmp) / "crawl.jsonl") if web else None
        folder = args.model
        if folder is None:
            if not Path(corpus).exists():
                print(f"skipped: {corpus} is absent")
                return 0
            folder = str(Path(tmp) / "en")
            t0 = time.monotonic()
            meta = train("en", corpus, folder, settings, cutoff_source=cutoff)
            print(f"trained on {corpus}: {meta['documents']} documents, {meta['tokens']:,} pieces, vocabulary "
                  f"{meta['sp_vocab_size']:,} in {time.monotonic() - t0:.1f} s "
                  f"(SentencePiece {meta['seconds']['sentencepiece']} s, lmplz + build_binary "
                  f"{meta['seconds']['lmplz_build_binary']} s); cut-offs {meta['cutoffs']}")
        model = ppl.load_language_model(folder, "en")
        ccnet = [d["ccnet"] for d in docs]
        for per_line in (False, True):
            ours = [model.score(d["text"], per_line) for d in docs]
            print(f"{'line by line' if per_line else 'the document as one sentence (cc_net mine.py)'}: Spearman "
                  f"rho [95 % bootstrap] over {against_ccnet(model, docs, per_line)}; ours median "
                  f"{sorted(ours)[len(ours) // 2]}, CCNet median {sorted(ccnet)[len(ccnet) // 2]}")
        buckets = [ppl.bucket(model.score(d["text"]), model.cutoffs) for d in docs]
        print("our buckets for CCNet's head documents:", {b: buckets.count(b) for b in sorted(set(buckets))})
        if args.sweep:
            sweep(corpus, settings, docs, web, cutoff, Path(tmp))

        texts = [d["text"] for d in docs]
        pieces = [model.pieces(t) for t in texts]
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            for doc_pieces in pieces:
                model.lm.score(doc_pieces)
        baseline = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            for t in texts:
                model.score(t)
        full = time.perf_counter() - t0
        n, chars = len(texts) * args.repeat, sum(map(len, texts)) * args.repeat
        print(f"scorer: {n / full:.0f} docs/s ({chars / full / 1e6:.2f} M chars/s, mean {chars // n:,} chars/doc); "
              f"KenLM query alone {n / baseline:.0f} docs/s; scorer/query time ratio {full / baseline:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
