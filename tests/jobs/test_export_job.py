"""jobs.export: Megatron indexed shards + manifest (SEAMS §4), read back by megatron-core."""
import hashlib
import json

import numpy as np
from deltalake import DeltaTable

from jobs.export import ExportJob, canonical_sha256
from jobs.shard_writer import plan_shards


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_plan_cuts_contiguous_ranges_by_tokens():
    assert plan_shards([3, 3, 3, 3, 3], 8) == [(0, 2), (2, 4), (4, 5)]
    assert plan_shards([3, 3, 3, 3, 3], 1, max_shards=2) == [(0, 3), (3, 5)]
    assert plan_shards([], 10) == []


def test_shards_read_back_with_eod_and_gold_tokens(pipeline):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    manifest = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    eod = manifest["tokenizer"]["eod_id"]
    gold = {r["doc_id"]: r for r in DeltaTable(str(pipeline.lake / "gold" / "tokens")).to_pyarrow_table().to_pylist()}
    seen = []
    assert len(manifest["shards"]) >= 2  # the fixture is cut into several shards
    for shard in manifest["shards"]:
        dataset = IndexedDataset(str(pipeline.shards_dir / shard["prefix"]))
        docs = [json.loads(line) for line in (pipeline.shards_dir / shard["docs"]).read_text().splitlines()]
        assert len(dataset) == shard["documents"] == len(docs)
        assert int(dataset.sequence_lengths.sum()) == shard["tokens"]
        assert dataset.index.dtype == np.uint16
        for i, doc in enumerate(docs):
            tokens = dataset[i]
            assert doc["i"] == i and doc["n_tokens"] == gold[doc["doc_id"]]["n_tokens"] == len(tokens) - 1
            assert tokens[-1] == eod and tokens[:-1].tolist() == gold[doc["doc_id"]]["tokens"]
            seen.append(doc["doc_id"])
    assert seen == sorted(gold)  # every document once, in doc_id order


def test_manifest_matches_files_tables_and_tokenizer(pipeline):
    manifest = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    assert manifest["format"] == "megatron-indexed/1" and manifest["dtype"] == "uint16"
    assert manifest["sha256"] == canonical_sha256(manifest)
    for shard in manifest["shards"]:
        assert sha(pipeline.shards_dir / (shard["prefix"] + ".bin")) == shard["bin_sha256"]
        assert sha(pipeline.shards_dir / (shard["prefix"] + ".idx")) == shard["idx_sha256"]
    for name, layer in (("gold.tokens", "gold/tokens"), ("silver.documents", "silver/documents"),
                        ("bronze.pages", "bronze/pages")):
        assert manifest["sources"][name]["version"] == DeltaTable(str(pipeline.lake / layer)).version()
    tokenizer = manifest["tokenizer"]
    assert sha(pipeline.tokenizer_dir / tokenizer["sha256"][:16] / "spm.model") == tokenizer["sha256"]
    assert tokenizer["model"].endswith(f"{tokenizer['sha256'][:16]}/spm.model")
    assert (tokenizer["eod_id"], tokenizer["pad_id"], tokenizer["type"]) == (2, 0, "sentencepiece-bpe")
    gold = DeltaTable(str(pipeline.lake / "gold" / "tokens")).to_pyarrow_table().to_pylist()
    assert manifest["totals"] == {"documents": len(gold), "tokens": sum(r["n_tokens"] + 1 for r in gold)}
    assert not (pipeline.shards_dir / "_staging").exists()


def test_rerun_is_byte_identical(pipeline):
    before = {p.name: sha(p) for p in pipeline.shards_dir.iterdir()}
    ExportJob().run(pipeline.args())
    after = {p.name: sha(p) for p in pipeline.shards_dir.iterdir()}
    assert after == before and "manifest.json" in after


def test_fewer_shards_replace_the_old_ones(pipeline, tmp_path):
    out = tmp_path / "shards"
    args = [a.replace(str(pipeline.shards_dir), str(out)) for a in pipeline.args()]
    ExportJob().run(args)
    ExportJob().run(args + ["-o", "export.max_shards=1", "-o", "export.target_tokens_per_shard=1"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["prefix"] for s in manifest["shards"]] == ["shard-00000"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "shard-00000.bin", "shard-00000.docs.jsonl",
                                                     "shard-00000.idx"]
