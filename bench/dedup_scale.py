"""Benchmark: the whole dedup stage at growing sizes, and a bucket of 100 K identical documents.

    .venv/bin/python bench/dedup_scale.py [--sizes 10000,100000,1000000] [--masters 'local[2]']
                                          [--identical 100000] [--driver-memory 6g]

Generated documents with a known duplicate structure (no ../shared/data needed): 200-500 words of a made-up
Zipf vocabulary in lines of ~30 words; of every 100 documents, 85 are originals, 10 near-duplicates of an
earlier original (a span of ~3% of its words deleted: Jaccard ~0.9) and 5 exact copies after normalization
(upper-cased, punctuation added); one original in 20 carries a shared boilerplate line.  Each size runs the
dedup job (`python -m jobs.dedup.job --full`, conf/jobs.yaml's settings) in its own process and prints one
JSON line: seconds, documents/s, the job's own time per part (`timings`: seconds and Spark jobs), drops by
reason against the planted counts, the peak RSS and CPU seconds of the job's process tree (driver JVM, Python
workers) and the load average before, during (mean, max) and after (the machine is shared).  Then the growth:
time(10x docs) / time(docs), overall, in CPU seconds and per part, against the 10x that linear cost would give.
`--identical N`: N identical documents plus N/10 originals, twice: with the default settings (exact dedup
takes the copies) and with `dedup.exact.enabled=false` (every band holds one bucket of N documents: the
LSH star cap, `dedup.minhash.all_pairs_max_bucket`, must keep it linear); time and peak RSS for both.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 100_000  # documents generated and written per Delta append (bounded memory at 1 M)
BOILERPLATE = "Sign up for our newsletter and never miss a story from the editors of this site again"


def _vocabulary(rng, size: int = 30000):
    import numpy as np

    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(["".join(rng.choice(letters, rng.integers(2, 11))) for _ in range(size)])


def generated_chunks(n: int, seed: int = 1):
    """Yields (doc_ids, texts, planted) per chunk; planted counts the near and exact copies made."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    pool: list[str] = []  # recent originals, the sources of copies
    for start in range(0, n, CHUNK):
        ids, texts = [], []
        planted = {"near_duplicate": 0, "exact_duplicate": 0}
        for i in range(start, min(n, start + CHUNK)):
            kind = i % 100
            if pool and kind >= 95:
                src = pool[rng.integers(len(pool))]
                text = src.upper().replace("\n", " ;\n")
                planted["exact_duplicate"] += 1
            elif pool and kind >= 85:
                words = pool[rng.integers(len(pool))].split(" ")
                cut = max(2, len(words) // 33)
                at = int(rng.integers(0, len(words) - cut))
                text = " ".join(words[:at] + words[at + cut:])
                planted["near_duplicate"] += 1
            else:
                length = int(rng.integers(200, 501))
                words = vocab[np.minimum(rng.zipf(1.15, length), vocab.size) - 1]
                text = "\n".join(" ".join(words[j:j + 30]) for j in range(0, length, 30))
                if i % 20 == 3:
                    text += "\n" + BOILERPLATE
                pool.append(text)
                if len(pool) > 5000:
                    pool.pop(int(rng.integers(len(pool))))
            ids.append(f"d{i:09d}")
            texts.append(text)
        yield ids, texts, planted


def identical_chunks(n: int, seed: int = 2):
    """n identical documents, then n/10 originals."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng)
    same = " ".join(vocab[rng.integers(0, vocab.size, 300)])
    for start in range(0, n, CHUNK):
        ids = [f"i{i:09d}" for i in range(start, min(n, start + CHUNK))]
        yield ids, [same] * len(ids), {"exact_duplicate": len(ids) - (1 if start == 0 else 0)}
    m = n // 10
    ids = [f"o{i:09d}" for i in range(m)]
    yield ids, [" ".join(vocab[rng.integers(0, vocab.size, 300)]) for _ in range(m)], {}


def write_silver(path: Path, chunks) -> dict:
    import pyarrow as pa
    from deltalake import write_deltalake

    planted: dict = {}
    total = 0
    for ids, texts, p in chunks:
        n = len(ids)
        none = pa.nulls(n, pa.string())
        table = pa.table({
            "doc_id": pa.array(ids, pa.string()), "url": pa.array([f"http://gen.test/{i}" for i in ids], pa.string()),
            "host": none, "fetch_time": pa.array([1735689600_000000 + total + k for k in range(n)], pa.timestamp("us", tz="UTC")),
            "title": none, "text": pa.array(texts, pa.string()), "language": none,
            "n_chars": pa.array([len(t) for t in texts], pa.int32()), "warc_file": none,
            "warc_offset": pa.nulls(n, pa.int64()), "content_sha256": none})
        write_deltalake(str(path), table, mode="append")
        total += n
        for k, v in p.items():
            planted[k] = planted.get(k, 0) + v
    return {"documents": total, "planted": planted}


class PeakRss:
    """The largest summed RSS of a process and its descendants, and their CPU seconds (each process's last
    reading), sampled every 0.5 s (psutil): CPU time is the steadier figure on a shared machine."""

    def __init__(self, pid: int):
        import psutil

        self.root, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self.cpu: dict[int, float] = {}
        self.loads: list[float] = []  # the 1-minute load average at each sample: what the run shared the cores with
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs if p.is_running()))
                for p in procs:
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                self.loads.append(os.getloadavg()[0])
            except psutil.Error:
                pass
            self._stop.wait(0.5)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def run_job(lake: Path, master: str, overlay: Path, overrides=()) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1", WEBLM_CONF_OVERLAY=str(overlay))
    args = [sys.executable, "-m", "jobs.dedup.job", "--lake", str(lake), "--full", "--master", master,
            "-o", "dedup.input_table=silver.documents"]
    for o in overrides:
        args += ["-o", o]
    load_before = os.getloadavg()
    start = time.monotonic()
    with open(lake.parent / "job.log", "w") as log:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        rss = PeakRss(proc.pid)
        proc.wait()
        peak = rss.stop()
    cpu = sum(rss.cpu.values())
    wall = time.monotonic() - start
    if proc.returncode:
        tail = (lake.parent / "job.log").read_text()[-3000:]
        raise SystemExit(f"dedup job failed on {master}:\n{tail}")
    m = json.loads((lake / "_metrics" / "dedup.json").read_text())
    return {"wall_s": round(wall, 1), "job_s": round(m["seconds"], 1), "input_rows": m["input_rows"],
            "output_rows": m["output_rows"], "dropped": m["skipped"], "timings": m.get("timings"),
            "candidate_pairs": m.get("candidate_pairs"), "duplicate_edges": m.get("duplicate_edges"),
            "largest_bucket": m.get("largest_bucket"), "giant_buckets": m.get("giant_buckets"),
            "components_on": m.get("components_on"), "peak_rss_mib": round(peak / 2**20), "cpu_s": round(cpu, 1),
            "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()],
            "load_during": {"mean": round(sum(rss.loads) / max(len(rss.loads), 1), 1), "max": round(max(rss.loads, default=0), 1)}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated document counts ('' = none)")
    parser.add_argument("--masters", default="local[2]", help="';'-separated, e.g. 'local[2];local-cluster[2,1,1024]'")
    parser.add_argument("--identical", type=int, default=0, help="also run a bucket of this many identical documents")
    parser.add_argument("--driver-memory", default="6g", help="spark.driver.memory for the local runs")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="weblm-dedup-scale-") as tmp:
        overlay = Path(tmp) / "overlay.yaml"
        overlay.write_text(json.dumps({"jobs": {"spark": {"conf": {"spark.driver.memory": args.driver_memory}}}}))
        cases = [("generated", int(n), generated_chunks) for n in args.sizes.split(",") if n]
        if args.identical:
            cases.append(("identical", args.identical, identical_chunks))
        for corpus, n, chunks in cases:
            lake = Path(tmp) / f"{corpus}-{n}" / "lake"
            start = time.monotonic()
            silver = write_silver(lake / "silver" / "documents", chunks(n))
            made = round(time.monotonic() - start, 1)
            runs = [(m, ()) for m in args.masters.split(";")] if corpus == "generated" else \
                [("local[2]", ()), ("local[2]", ("dedup.exact.enabled=false",))]
            for master, overrides in runs:
                r = run_job(lake, master, overlay, overrides)
                row = {"corpus": corpus, "documents": silver["documents"], "master": master,
                       "overrides": list(overrides), "planted": silver["planted"], "generate_s": made,
                       "docs_per_s": round(silver["documents"] / r["job_s"], 1),
                       "docs_per_cpu_s": round(silver["documents"] / r["cpu_s"], 1) if r["cpu_s"] else None, **r}
                print(json.dumps(row), flush=True)
                rows.append(row)
    generated = {(r["master"], r["documents"]): r for r in rows if r["corpus"] == "generated"}
    for (master, n), small in sorted(generated.items()):
        big = generated.get((master, n * 10))
        if big:
            parts = {k: round(big["timings"][k]["seconds"] / v["seconds"], 2)
                     for k, v in (small["timings"] or {}).items() if v["seconds"] and k in (big["timings"] or {})}
            print(json.dumps({"growth": f"{n} -> {n * 10}", "master": master,
                              "time_ratio": round(big["job_s"] / small["job_s"], 2),
                              "cpu_ratio": round(big["cpu_s"] / small["cpu_s"], 2) if small["cpu_s"] else None,
                              "linear_would_be": 10.0, "part_time_ratios": parts}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
