"""Speed of the model scorers (perplexity, toxicity, quality_classifier) on real web text, against language ID.

    .venv/bin/python bench/quality_scorers.py --kenlm DIR --classifier DIR [--docs 1000] [--repeat 3]

DIR arguments are model folders trained by `python -m jobs.quality.train_kenlm --out DIR` and
`python -m jobs.quality.train_classifier --out DIR`.  Documents: the hand-labelled main text of WCXB's dev pages
(../shared/data/extraction/wcxb_dev, real web pages of 7 types).  Each scorer runs the way the quality job calls it
(`score(texts, languages)` over batches of 500); the baseline is lid.176 language ID (jobs/quality/langid.py) over
the same batches, in the same process, so the ratios hold on any machine.  Skips (exit 0) when the data is absent.
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WCXB = ROOT.parent / "shared" / "data" / "extraction" / "wcxb_dev" / "dev" / "ground-truth"
sys.path.insert(0, str(ROOT))
BATCH = 500


def documents(limit: int) -> list[str]:
    texts = []
    for path in sorted(glob.glob(str(WCXB / "*.json")))[:limit]:
        text = (json.loads(Path(path).read_text()).get("ground_truth") or {}).get("main_content") or ""
        if text.strip():
            texts.append(text)
    return texts


def timed(fn, texts: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i in range(0, len(texts), BATCH):
            fn(texts[i:i + BATCH])
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kenlm", required=True, help="an English model folder from train_kenlm --out")
    parser.add_argument("--classifier", required=True, help="a model folder from train_classifier --out")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="passes; the fastest counts")
    args = parser.parse_args()
    if not WCXB.is_dir():
        print(f"skipped: {WCXB} is absent")
        return 0
    from jobs.quality import langid
    from jobs.quality.classifiers import QualityClassifierScorer, ToxicityScorer
    from jobs.quality.perplexity import PerplexityScorer

    texts = documents(args.docs)
    languages = langid.identify(texts)[0]
    scorers = {"perplexity": PerplexityScorer(), "toxicity": ToxicityScorer(), "quality_classifier": QualityClassifierScorer()}
    scorers["perplexity"].load({"model_dir": str(Path(args.kenlm).parent), "languages": [Path(args.kenlm).name]}, None)
    scorers["toxicity"].load({"classifier_languages": ["en"], "max_chars": 100000}, None)
    scorers["quality_classifier"].load({"model_dir": args.classifier}, None)
    lang_of = dict(zip(texts, languages))
    baseline = timed(langid.identify, texts, args.repeat)
    chars = sum(map(len, texts))
    print(f"{len(texts)} documents, mean {chars // len(texts):,} chars, {languages.count('en')} English; "
          f"baseline lid.176: {len(texts) / baseline:,.0f} docs/s")
    for name, scorer in scorers.items():
        seconds = timed(lambda batch, s=scorer: s.score(batch, [lang_of[t] for t in batch]), texts, args.repeat)
        print(f"{name}: {len(texts) / seconds:,.0f} docs/s ({chars / seconds / 1e6:.2f} M chars/s), "
              f"{seconds / baseline:.1f}x language ID's time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
