"""Benchmark: dedup speed, as ratios measured in one run on the same documents.

    .venv/bin/python bench/dedup_speed.py signatures [--docs N]
    .venv/bin/python bench/dedup_speed.py stage [--sizes 10000,100000] [--masters 'local[2];local-cluster[2,1,1024]'] [--skew]

`signatures`: real documents (WCXB's labelled main texts, ../shared/data/extraction/wcxb_dev; generated
texts of a Zipf vocabulary when that is absent), 128 permutations, word 5-grams, one core, best of 3, in
wall-clock and in this process's CPU time (the machine is shared: CPU time is the steadier figure):
  - a datasketch pipeline: normalize in Python (unicodedata + re, per document), shingle, `MinHash.update_batch`
  - the same normalization and shingles, signed with rensa's `RMinHash.update` (one call per document)
  - weblm (`jobs.dedup.lsh.sign_batch`): normalize, shingle, sign, band, exact key, per Arrow batch of 1,000
and the signing alone for each (given the shingles: weblm's flat hash buffer vs bare rensa per document),
and each signature's Jaccard-estimate error against the exact Jaccard on pairs of a document and an edited
copy.  Goals: pipeline ratio weblm/datasketch >= 20, signing ratio weblm/rensa >= 1.
`stage` (bench/dedup_scale.py is the scale bench: a planted duplicate structure, time per part, CPU seconds,
growth 10 K -> 100 K -> 1 M, a 100 K identical bucket): the whole dedup job (`python -m jobs.dedup.job --full`) on generated documents (sentences of the
real texts recombined, 10% near-duplicates), per size and Spark master: seconds and documents/s, so the
growth with size can be read; `--skew`: near-identical documents instead (one template, one unique word
each), so every band holds one bucket of all of them: the giant-bucket case, with the largest bucket, the
time and the largest process's peak RSS.  The job runs with conf/jobs.yaml's Spark settings plus
$WEBLM_CONF_OVERLAY: from 100 K documents the local driver needs more than Spark's default 1 GB heap, e.g.
an overlay with `jobs: {spark: {shuffle_partitions: 16, conf: {spark.driver.memory: 4g}}}`.
    .venv/bin/python bench/dedup_speed.py stage --sizes 10000,100000 --masters 'local[2];local-cluster[2,1,1024]'
    .venv/bin/python bench/dedup_speed.py stage --sizes 100000 --skew
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
NUM_PERM, NGRAM = 128, 5


def generated_texts(n: int = 1500, words: int = 1200, seed: int = 7) -> list[str]:
    """Stand-in corpus when ../shared/data is absent: sentences of a Zipf-distributed made-up vocabulary."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 10))) for _ in range(20000)])
    out = []
    for _ in range(n):
        w = vocab[np.minimum(rng.zipf(1.2, words), vocab.size) - 1]
        out.append(" ".join(f"{x}." if i % 15 == 14 else x for i, x in enumerate(w.tolist())))
    return out


def bench_texts() -> tuple[str, list[str]]:
    real = real_texts() if DATA.is_dir() else []
    return ("wcxb_dev (real)", real) if real else ("generated (../shared/data absent)", generated_texts())


def real_texts(min_words: int = 50) -> list[str]:
    out = []
    for path in sorted(glob.glob(str(DATA / "extraction" / "wcxb_dev" / "dev" / "ground-truth" / "*.json"))):
        text = (json.loads(Path(path).read_text(encoding="utf-8")).get("ground_truth") or {}).get("main_content")
        if text and len(text.split()) >= min_words:
            out.append(text)
    return out


_PUNCT = re.compile(r"[^\w\s]|_", re.UNICODE)
_DIGIT = re.compile(r"\d", re.UNICODE)


def python_shingles(text: str) -> list[str]:
    """The baseline's normalization: what a datasketch user writes (one Python pass per document)."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()
    words = _PUNCT.sub(" ", _DIGIT.sub("0", text)).split()
    return list({" ".join(words[i:i + NGRAM]) for i in range(max(1, len(words) - NGRAM + 1))}) if words else []


def best_of(fn, repeat: int = 3) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process) over `repeat` runs."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return min(wall), min(cpu)


def signatures_bench(n_docs: int | None) -> dict:
    import pyarrow as pa
    import rensa
    from datasketch import MinHash

    from jobs.config import load_jobs_config
    from jobs.dedup import minhash
    from jobs.dedup.lsh import sign_batch
    from jobs.dedup.normalize import word_hashes_of_batch

    source, texts = bench_texts()
    texts = texts[:n_docs]
    words = sum(len(t.split()) for t in texts)
    cfg = load_jobs_config([f"dedup.minhash.num_perm={NUM_PERM}"]).dedup.minhash
    shingled = [python_shingles(t) for t in texts]
    encoded = [[s.encode() for s in sh] for sh in shingled]

    def datasketch_pipeline():
        for t in texts:
            m = MinHash(num_perm=NUM_PERM)
            m.update_batch([s.encode() for s in python_shingles(t)])
            m.digest()

    def datasketch_sign():
        for sh in encoded:
            m = MinHash(num_perm=NUM_PERM)
            m.update_batch(sh)

    def rensa_pipeline():
        for t in texts:
            m = rensa.RMinHash(num_perm=NUM_PERM, seed=1)
            m.update(python_shingles(t))
            m.digest()

    def rensa_sign():
        for sh in shingled:
            m = rensa.RMinHash(num_perm=NUM_PERM, seed=1)
            m.update(sh)
            m.digest()

    batches = [pa.array(texts[i:i + 1000], pa.large_string()) for i in range(0, len(texts), 1000)]
    ids = [pa.array([str(j) for j in range(len(b))]) for b in batches]

    def weblm_pipeline():
        for i, b in zip(ids, batches):
            sign_batch(i, b, cfg)

    sign_batch(ids[0][:10], batches[0][:10], cfg)  # numba's compiled code loads from its cache once per process
    flat = []
    for b in batches:
        wh, o = word_hashes_of_batch(b)
        flat.append(minhash.shingle_hashes(wh, o, NGRAM))

    def weblm_sign():
        for h, o in flat:
            minhash.band_hashes(minhash.signatures(h, o, NUM_PERM, 1), cfg.bands, cfg.rows)

    t = {name: best_of(fn) for name, fn in (("datasketch_pipeline", datasketch_pipeline), ("datasketch_sign", datasketch_sign),
                                           ("rensa_pipeline", rensa_pipeline), ("rensa_sign", rensa_sign),
                                           ("weblm_pipeline", weblm_pipeline), ("weblm_sign", weblm_sign))}
    # accuracy: a document and a copy with a span deleted (Jaccard spread over 0.3..1)
    rng = random.Random(3)
    errors = {"datasketch": [], "rensa": [], "weblm": []}
    sample = [x for x in texts if len(x.split()) > 300][:300]
    for text in sample:
        w = text.split(" ")
        cut = rng.randrange(0, len(w) // 3)
        start = rng.randrange(0, len(w) - cut)
        other = " ".join(w[:start] + w[start + cut:])
        a, b = set(python_shingles(text)), set(python_shingles(other))
        exact = len(a & b) / len(a | b)
        da, db = MinHash(num_perm=NUM_PERM), MinHash(num_perm=NUM_PERM)
        da.update_batch([s.encode() for s in a])
        db.update_batch([s.encode() for s in b])
        errors["datasketch"].append(da.jaccard(db) - exact)
        ra, rb = rensa.RMinHash(num_perm=NUM_PERM, seed=1), rensa.RMinHash(num_perm=NUM_PERM, seed=1)
        ra.update(list(a))
        rb.update(list(b))
        errors["rensa"].append(ra.jaccard(rb) - exact)
        wh, o = word_hashes_of_batch(pa.array([text, other], pa.large_string()))
        h, so = minhash.shingle_hashes(wh, o, NGRAM)
        sig = minhash.signatures(h, so, NUM_PERM, 1)
        sets = minhash.unique_sets(h, so)
        errors["weblm"].append(minhash.estimated_jaccard(sig[0], sig[1]) - minhash.jaccard(*sets))
    n = len(texts)

    def ratios(k: int) -> dict:
        return {"pipeline_weblm_vs_datasketch": round(t["datasketch_pipeline"][k] / t["weblm_pipeline"][k], 1),
                "pipeline_weblm_vs_rensa_pipeline": round(t["rensa_pipeline"][k] / t["weblm_pipeline"][k], 1),
                "sign_weblm_vs_rensa": round(t["rensa_sign"][k] / t["weblm_sign"][k], 2),
                "sign_rensa_vs_datasketch": round(t["datasketch_sign"][k] / t["rensa_sign"][k], 1)}

    return {
        "texts": source, "documents": n, "mean_words": round(words / n), "num_perm": NUM_PERM, "ngram": NGRAM,
        "docs_per_s_wall": {k: round(n / v[0]) for k, v in t.items()},
        "docs_per_s_cpu": {k: round(n / v[1]) for k, v in t.items()},
        "ratios_wall": ratios(0), "ratios_cpu": ratios(1),
        "goals": {"pipeline_weblm_vs_datasketch": ">= 20", "sign_weblm_vs_rensa": ">= 1.0"},
        "estimate_error_sd": {k: round(statistics.pstdev(v), 4) for k, v in errors.items()},
        "estimate_error_mean": {k: round(statistics.fmean(v), 4) for k, v in errors.items()},
        "estimate_pairs": len(sample),
    }


def generated_silver(path: Path, n: int, seed: int = 5) -> None:
    """n documents of ~15 real sentences each; every 10th a near-copy (one sentence changed) of an earlier one."""
    import pyarrow as pa
    from deltalake import write_deltalake

    sentences = [s for t in bench_texts()[1] for s in re.split(r"(?<=[.!?])\s+", t) if len(s.split()) >= 5]
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        if i % 10 == 9 and texts:
            doc = texts[rng.randrange(len(texts))].split("\n")
            doc[rng.randrange(len(doc))] = rng.choice(sentences)
            texts.append("\n".join(doc))
        else:
            texts.append("\n".join(rng.choice(sentences) for _ in range(15)))
    ids = [f"g{i:08d}" for i in range(n)]
    none = pa.nulls(n, pa.string())
    table = pa.table({"doc_id": ids, "url": [f"http://gen.test/{i}" for i in range(n)], "host": none,
                      "fetch_time": pa.array([1735689600_000000 + i for i in range(n)], pa.timestamp("us", tz="UTC")),
                      "title": none, "text": texts, "language": none, "n_chars": pa.array([len(t) for t in texts], pa.int32()),
                      "warc_file": none, "warc_offset": pa.nulls(n, pa.int64()), "content_sha256": none})
    write_deltalake(str(path), table, mode="overwrite")


def skewed_silver(path: Path, n: int, seed: int = 9) -> None:
    """n near-identical documents: one 300-word template with one word replaced by a unique token, so
    every pair is at Jaccard ~0.97 and every band puts all n in one bucket (the giant-bucket case)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    rng = random.Random(seed)
    words = " ".join(bench_texts()[1][0].split()[:300]).split(" ")
    texts = []
    for i in range(n):
        doc = list(words)
        doc[rng.randrange(len(doc))] = "q" + "".join(chr(97 + (i // 26 ** k) % 26) for k in range(4))  # letters: digits fold to 0
        texts.append(" ".join(doc))
    none = pa.nulls(n, pa.string())
    table = pa.table({"doc_id": [f"s{i:08d}" for i in range(n)], "url": [f"http://skew.test/{i}" for i in range(n)],
                      "host": none, "fetch_time": pa.array([1735689600_000000 + i for i in range(n)], pa.timestamp("us", tz="UTC")),
                      "title": none, "text": texts, "language": none, "n_chars": pa.array([len(t) for t in texts], pa.int32()),
                      "warc_file": none, "warc_offset": pa.nulls(n, pa.int64()), "content_sha256": none})
    write_deltalake(str(path), table, mode="overwrite")


def stage_bench(sizes: list[int], masters: list[str], skew: bool = False) -> list[dict]:
    import resource

    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="weblm-dedup-bench-") as tmp:
            lake = Path(tmp) / "lake"
            (skewed_silver if skew else generated_silver)(lake / "silver" / "documents", n)
            for master in masters:
                env = dict(os.environ, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
                start, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run([sys.executable, "-m", "jobs.dedup.job", "--lake", str(lake), "--full", "--master", master,
                                       "-o", "dedup.input_table=silver.documents"],
                                      cwd=ROOT, env=env, capture_output=True, text=True)
                wall = time.monotonic() - start
                usage = resource.getrusage(resource.RUSAGE_CHILDREN)
                if proc.returncode:
                    raise SystemExit(f"dedup job failed on {master} at {n} documents:\n{proc.stderr[-3000:]}")
                metrics = json.loads((lake / "_metrics" / "dedup.json").read_text())
                extra = metrics.get("extra", metrics)
                row = {"documents": n, "corpus": "skewed" if skew else "generated", "master": master,
                       "job_s": round(metrics["seconds"], 1), "wall_s": round(wall, 1),
                       "docs_per_s": round(n / metrics["seconds"]),
                       "driver_cpu_s": round(usage.ru_utime + usage.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
                       "max_rss_mib_any_process": round(usage.ru_maxrss / 1024),
                       "largest_bucket": extra.get("largest_bucket"), "giant_buckets": extra.get("giant_buckets"),
                       "dropped": metrics["skipped"]}
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("signatures", "stage"))
    parser.add_argument("--docs", type=int, help="signatures: at most this many documents (default: all)")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--masters", default="local[2]", help="';'-separated, e.g. 'local[2];local-cluster[2,1,1024]'")
    parser.add_argument("--skew", action="store_true", help="stage: near-identical documents (one giant bucket per band)")
    args = parser.parse_args(argv)
    if args.what == "signatures":
        print(json.dumps(signatures_bench(args.docs), indent=2))
    else:
        stage_bench([int(x) for x in args.sizes.split(",")], args.masters.split(";"), args.skew)
    return 0


if __name__ == "__main__":
    sys.exit(main())
