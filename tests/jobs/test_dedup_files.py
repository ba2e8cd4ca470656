"""`python -m jobs.dedup_files IN.jsonl OUT_DIR` and the scorer, and connected components on Spark."""
from __future__ import annotations

import importlib.util
import json
import random
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_connected_components_of_chains_stars_and_islands(spark):
    from jobs.dedup.components import connected_components, local_components

    chain = [(f"c{i:03d}", f"c{i + 1:03d}") for i in range(40)]          # a long path: many rounds
    star = [("s00", f"s{i:02d}") for i in range(1, 30)]                   # one hub
    island = [("x2", "x1"), ("x3", "x2")]
    edges = spark.createDataFrame(chain + star + island, "a string, b string")
    stats = {}
    cc = {r["doc_id"]: r["cluster_id"] for r in connected_components(edges, 40, "local", stats).collect()}
    assert len(cc) == 41 + 30 + 3
    assert {cc[f"c{i:03d}"] for i in range(41)} == {"c000"}
    assert {cc[f"s{i:02d}"] for i in range(30)} == {"s00"}
    assert {cc["x1"], cc["x2"], cc["x3"]} == {"x1"}
    assert 1 < stats["component_rounds"] <= 12
    assert local_components(chain + star + island) == cc  # the driver's scipy components: the same clusters


def test_survivors_of_all_clusters_at_once_follow_each_cluster_alone():
    from jobs.dedup.components import choose_survivors, local_components, survivors_of_clusters

    edges = [("a", "b"), ("b", "c"), ("x", "y")]  # a~b, b~c (a, c apart): both ends of the chain survive
    clusters = local_components(edges)
    ranked = ["b", "y", "a", "x", "c"]  # priority order across clusters
    assert survivors_of_clusters(clusters, ranked, edges) == {
        **choose_survivors(["b", "a", "c"], edges[:2]), **choose_survivors(["y", "x"], edges[2:])}
    assert survivors_of_clusters(clusters, ["a", "c", "b", "x", "y"], edges) == {"a": None, "c": None, "b": "a",
                                                                                  "x": None, "y": "x"}


def test_dedup_files_writes_pairs_and_one_line_per_document(spark, tmp_path):
    from jobs import dedup_files

    rng = random.Random(9)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    base = " ".join(rng.choice(vocab) for _ in range(400))
    words = base.split()
    rows = [{"id": "base", "text": base},
            {"id": "edit", "text": " ".join(words[:200] + words[210:])},          # J ~ 0.96 with base
            {"id": "far", "text": " ".join(words[:200] + [rng.choice(vocab) for _ in range(200)])},  # J ~ 0.33
            {"id": "copy", "text": base.upper()},                                 # exact after normalization
            {"id": "empty", "text": ""},
            {"id": "other", "text": " ".join(rng.choice(vocab) for _ in range(300))}]
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert dedup_files.main([str(corpus), str(out)]) == 0
    pairs = {(p["a"], p["b"]): p["jaccard"] for p in map(json.loads, (out / "pairs.jsonl").read_text().splitlines())}
    assert set(pairs) == {("base", "copy"), ("base", "edit"), ("copy", "edit")}
    assert pairs[("base", "copy")] == 1.0 and 0.85 < pairs[("base", "edit")] < 1.0
    docs = [json.loads(line) for line in (out / "docs.jsonl").read_text().splitlines()]
    assert [d["id"] for d in docs] == [r["id"] for r in rows]
    by_id = {d["id"]: d for d in docs}
    assert sum(by_id[i]["keep"] for i in ("base", "edit", "copy")) == 1
    assert by_id["far"]["keep"] and by_id["other"]["keep"] and by_id["empty"]["keep"]
    assert len({by_id[i]["cluster_id"] for i in ("base", "edit", "copy")}) == 1

    # the scorer against brute-force pairs from the corpus generator's own Jaccard
    corpus_tools, scorer = load_bench("dedup_corpus"), load_bench("dedup_score")
    sets = {r["id"]: corpus_tools.shingles(r["text"]) for r in rows}
    truth = [{"a": a, "b": b, "jaccard": j} for a, b, j in corpus_tools.true_pairs(sets, 0.5)]
    score = scorer.score(truth, [{"a": a, "b": b} for a, b in pairs], docs, 0.8)
    assert score["pair_precision"] == 1.0 and score["pair_recall"] == 1.0
    assert score["true_pairs_both_kept"] == 0 and score["dropped_without_kept_duplicate"] == 0
    assert json.loads((out / "metrics.json").read_text())["status"] == "ok"


def test_a_bad_input_line_is_refused_with_its_line_number(tmp_path):
    """The command's output has one line per input document, so a line it cannot read stops it, saying which."""
    from jobs.scratch_lake import read_jsonl
    path = tmp_path / "in.jsonl"
    good = json.dumps({"id": 1, "text": "a b c"})
    for bad, message in (('{"id": 2, "text": "x"', "in.jsonl:2: not a JSON line"),
                         ('["id", "text"]', "in.jsonl:2: each line needs 'id' and 'text'; this one has list"),
                         ('{"id": 2}', r"in.jsonl:2: each line needs 'id' and 'text'; this one has \['id'\]"),
                         ('{"id": 2, "text": 7}', "in.jsonl:2: 'text' must be a string, not int"),
                         (good, "in.jsonl:2: id '1' appears twice"),
                         ('{"id": 2, "text": "caf\\ud800"}', re.escape("in.jsonl:2: 'text' holds a lone surrogate "
                                                                       "('\\ud800' at character 3): not text"))):
        path.write_text(good + "\n" + bad + "\n")
        with pytest.raises(SystemExit, match=message):
            read_jsonl(str(path))
    path.write_bytes(good.encode() + b"\n" + '{"id": 2, "text": "caf\u00e9"}'.encode("cp1252") + b"\n")
    with pytest.raises(SystemExit, match=re.escape("in.jsonl:2: not UTF-8 (invalid continuation byte at byte 22 of")):
        read_jsonl(str(path))
    path.write_text(good + "\n\n" + json.dumps({"id": "x", "text": None}) + "\n")
    assert read_jsonl(str(path)) == [{"doc_id": "1", "text": "a b c"}, {"doc_id": "x", "text": ""}]
