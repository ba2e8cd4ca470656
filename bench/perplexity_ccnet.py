"""Our CCNet-recipe perplexities against CCNet's own, and the scorer's speed.

    .venv/bin/python bench/perplexity_ccnet.py [--corpus ../shared/data/text/wiki_text] [--model DIR] [--repeat 20]

Trains an English model with `jobs.quality.train_kenlm.train` on the reference corpus (default: conf's
quality.scorers.perplexity.train settings and corpus; `--model DIR` reuses a trained one), scores the 30 Common Crawl
documents of ../shared/data/text/cc_text_samples (dolma's test data: CC-MAIN-2020-16 WET text with CCNet's
`metadata.perplexity`, all in CCNet's head bucket), and prints the Spearman rank correlation of our perplexities with
CCNet's, line by line (cc_net DocLM) and the document as one line.  CCNet's English model was trained on 1M Wikipedia
documents with a 65k SentencePiece vocabulary; ours on whatever --corpus holds, so the correlation says how well the
ranking transfers, not that the numbers match.  The head/middle/tail cut-offs come from the perplexities of real web
pages (WCXB's labelled main text, ../shared/data/extraction/wcxb_dev), as CCNet's came from Common Crawl: the bucket
counts say how many of CCNet's head documents our model also puts in the head.  Speed: documents/s of the whole scorer (normalize + SentencePiece +
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
                value = (doc.get("metadata") or {}).get("perplexity")
                if value is not None and doc.get("text"):
                    docs.append({"text": doc["text"], "ccnet": float(value)})
    return docs


def crawl_corpus(folder: Path) -> str | None:
    """WCXB's hand-labelled main text of real web pages as JSONL: the crawl whose percentiles set the buckets, as
    CCNet set its cut-offs on Common Crawl (None when absent: held-out reference documents then)."""
    pages = sorted((DATA.parent / "extraction" / "wcxb_dev" / "dev" / "ground-truth").glob("*.json"))
    texts = [(json.loads(p.read_text()).get("ground_truth") or {}).get("main_content") or "" for p in pages]
    if not any(texts):
        return None
    out = folder / "crawl.jsonl"
    out.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts if t.strip()))
    return str(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(DATA / "wiki_text"))
    parser.add_argument("--model", help="a trained model folder (skips training)")
    parser.add_argument("--repeat", type=int, default=20, help="passes over the documents for the speed figure")
    args = parser.parse_args()
    if not (DATA / "cc_text_samples").is_dir():
        print(f"skipped: {DATA / 'cc_text_samples'} is absent")
        return 0
    from scipy.stats import spearmanr

    from jobs.config import load_jobs_config
    from jobs.quality import perplexity as ppl
    from jobs.quality.train_kenlm import train

    docs = ccnet_documents()
    with tempfile.TemporaryDirectory(prefix="bench-kenlm-") as tmp:
        folder = args.model
        if folder is None:
            if not Path(args.corpus).exists():
                print(f"skipped: {args.corpus} is absent")
                return 0
            section = load_jobs_config([]).quality.scorers["perplexity"]
            settings = {**section["train"], "per_line": section.get("per_line", True)}
            folder = str(Path(tmp) / "en")
            t0 = time.monotonic()
            meta = train("en", args.corpus, folder, settings, cutoff_source=crawl_corpus(Path(tmp)))
            print(f"trained on {meta['documents']} documents, {meta['tokens']:,} pieces, vocabulary "
                  f"{meta['sp_vocab_size']:,} in {time.monotonic() - t0:.1f} s "
                  f"(SentencePiece {meta['seconds']['sentencepiece']} s, lmplz + build_binary "
                  f"{meta['seconds']['lmplz_build_binary']} s); cut-offs {meta['cutoffs']}")
        model = ppl.load_language_model(folder, "en")
        ccnet = [d["ccnet"] for d in docs]
        for per_line in (True, False):
            ours = [model.score(d["text"], per_line) for d in docs]
            rho, p = spearmanr(ours, ccnet)
            print(f"{'line by line' if per_line else 'one line per document'}: Spearman rho {rho:.3f} (p={p:.3g}) "
                  f"over {len(docs)} documents; ours median {sorted(ours)[len(ours) // 2]}, CCNet median "
                  f"{sorted(ccnet)[len(ccnet) // 2]}")
        buckets = [ppl.bucket(model.score(d["text"]), model.cutoffs) for d in docs]
        print("our buckets for CCNet's head documents:", {b: buckets.count(b) for b in sorted(set(buckets))})

        texts = [d["text"] for d in docs]
        pieces = [[model.pieces(line) for line in t.split("\n")] for t in texts]
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            for doc_lines in pieces:
                sum(model.lm.score(p) for p in doc_lines if p)
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
