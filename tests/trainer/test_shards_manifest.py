"""The trainer reads shards only through a manifest it has checked (SEAMS §4)."""
import json
import shutil

import numpy as np
import pytest
from megatron.core.datasets.indexed_dataset import IndexedDataset

from conftest import tiny_config
from trainer.backend import open_backend
from trainer.data import build_datasets, global_batch_indices, micro_batches, rank_slice
from trainer.manifest import ManifestError, canonical_sha256, load_manifest, read_doc_ids


def test_shards_load_with_the_manifests_counts(manifest_path):
    manifest = load_manifest(manifest_path)
    assert len(manifest.shards) == 2 and manifest.vocab_size == 256 and manifest.eod_id == 2
    for shard in manifest.shards:
        indexed = IndexedDataset(shard.prefix)
        assert len(indexed) == shard.documents == len(read_doc_ids(shard))
        assert int(indexed.sequence_lengths.sum()) == shard.tokens
        assert all(indexed[i][-1] == manifest.eod_id for i in range(len(indexed)))   # EOD closes each document
    assert manifest.total_tokens == json.loads(manifest_path.read_text())["totals"]["tokens"]


def test_datasets_have_the_planned_sizes(manifest_path, tmp_path):
    cfg = tiny_config("schedule.steps=5")
    with open_backend(cfg):
        datasets = build_datasets(cfg, load_manifest(manifest_path), tmp_path / "cache")
        # megatron rounds each shard's share up, so the blend holds at least the samples the run draws.
        assert 5 * cfg.batch.global_batch_size <= len(datasets.train) <= 5 * cfg.batch.global_batch_size + 2
        assert len(datasets.valid) >= cfg.schedule.eval_batches * cfg.batch.global_batch_size
        sample = datasets.train[0]
        assert sample["tokens"].shape == (cfg.model.seq_length,)
        # Blend weights are token counts: both shards (of similar size) feed the batch.
        assert set(np.asarray(datasets.train.dataset_index[:16]).tolist()) == {0, 1}


def copy_shards(manifest_path, tmp_path):
    folder = tmp_path / "shards"
    shutil.copytree(manifest_path.parent, folder)
    return folder


def test_corrupted_shard_is_refused_naming_the_shard(manifest_path, tmp_path):
    folder = copy_shards(manifest_path, tmp_path)
    data = bytearray((folder / "shard-00001.bin").read_bytes())
    data[10] ^= 0xFF
    (folder / "shard-00001.bin").write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"shard shard-00001: shard-00001.bin sha256 does not match"):
        load_manifest(folder / "manifest.json")


def test_missing_shard_is_refused(manifest_path, tmp_path):
    folder = copy_shards(manifest_path, tmp_path)
    (folder / "shard-00000.idx").unlink()
    with pytest.raises(ManifestError, match=r"shard shard-00000: .*shard-00000.idx is missing"):
        load_manifest(folder / "manifest.json")


def test_edited_manifest_is_refused(manifest_path, tmp_path):
    folder = copy_shards(manifest_path, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["shards"][0]["tokens"] += 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="does not match the manifest's content"):
        load_manifest(folder / "manifest.json")
    manifest["sha256"] = canonical_sha256(manifest)   # re-hashed: accepted, indentation does not matter
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=4))
    assert load_manifest(folder / "manifest.json").shards[0].tokens == manifest["shards"][0]["tokens"]


def test_batch_order_is_a_function_of_seed_and_step(manifest_path, tmp_path):
    cfg = tiny_config("schedule.steps=6")
    assert global_batch_indices(3, 16) == list(range(48, 64))
    # dp ranks take strided slices: together they are exactly the global batch, whatever dp is.
    assert sorted(rank_slice(list(range(16)), 0, 2) + rank_slice(list(range(16)), 1, 2)) == list(range(16))
    draws = []
    for cache in ("a", "b", "a"):   # two fresh index builds and one cache hit
        with open_backend(cfg):
            datasets = build_datasets(cfg, load_manifest(manifest_path), tmp_path / cache)
            batches, lineage = micro_batches(cfg, datasets, 4, 0, 1)
            draws.append(([b.tokens for b in batches], lineage))
    for tokens, lineage in draws[1:]:
        assert lineage == draws[0][1]
        assert all((a == b).all() for a, b in zip(tokens, draws[0][0]))
    other_seed = tiny_config("schedule.steps=6", "seed=99")
    with open_backend(other_seed):
        datasets = build_datasets(other_seed, load_manifest(manifest_path), tmp_path / "c")
        assert micro_batches(other_seed, datasets, 4, 0, 1)[1] != draws[0][1]
