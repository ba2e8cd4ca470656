"""The trainer reads shards only through a manifest it has checked (SEAMS §4)."""
import json
import shutil

import numpy as np
import pytest
from megatron.core.datasets.indexed_dataset import IndexedDataset

from conftest import tiny_config
from trainer.backend import open_backend
from trainer.data import build_datasets, epoch_order, global_batch_indices, micro_batches, rank_slice
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


def test_the_training_dataset_is_one_epoch_of_every_shard(manifest_path, tmp_path):
    cfg = tiny_config("schedule.steps=5")
    manifest = load_manifest(manifest_path)
    with open_backend(cfg):
        datasets = build_datasets(cfg, manifest, tmp_path / "cache")
        seq = cfg.model.seq_length
        expected = []
        for shard in manifest.shards:   # by hand: the train split's documents, read once, in windows of seq+1 tokens
            indexed = IndexedDataset(shard.prefix)   # held: its lengths are a view of its mmap
            lengths = indexed.sequence_lengths
            train_docs = int(round(0.9 * len(lengths)))   # the tiny config's data.split "90,10,0", rounded as megatron does
            expected.append((int(lengths[:train_docs].sum()) - 1) // seq)
        assert [len(d) for d in datasets.train.datasets] == expected
        assert len(datasets.train) == sum(expected)   # a run of any length draws from this one epoch
        assert len(datasets.valid) >= 1
        assert datasets.train[0]["tokens"].shape == (seq,)
        # Both shards (of similar size) feed the first batches.
        assert set(np.asarray(datasets.train.dataset_index[:16]).tolist()) == {0, 1}


def test_a_shard_whose_part_of_a_split_fills_no_sample_is_left_out_of_that_split_with_a_warning(tmp_path, caplog):
    """megatron's builder asserts that every shard it blends has a sample (a bare AssertionError): a small last shard,
    or shards of a document or two whose valid share rounds to none, used to stop the run there, evaluating or not."""
    from shardkit import EOD, build_shards
    from trainer.data import eval_batches
    run = lambda n, length: [[3 + (i + j) % 200 for j in range(length - 1)] for i in range(n)]   # + EOD: length
    # shard 0: 20 documents of 100 tokens (18 train, 2 valid); shard 1: one of 300 (train only: 10 % of one
    # document rounds to none); shard 2: one of 40, under one sample of the tiny model's 64 tokens
    manifest = load_manifest(build_shards(tmp_path / "shards", n_shards=3,
                                          shard_documents=[run(20, 100), run(1, 300), run(1, 40)]))
    samples = lambda tokens: (tokens - 1) // 64   # one epoch, the label's extra token, the partial sample dropped
    for evaluate in (True, False):
        cfg = tiny_config("schedule.steps=5", *([] if evaluate else ["schedule.eval_interval=0"]))
        caplog.clear()
        with open_backend(cfg), caplog.at_level("WARNING", logger="trainer.data"):
            datasets = build_datasets(cfg, manifest, tmp_path / f"cache-{evaluate}")
            assert datasets.stages[0].shard_ids == [0, 1]
            assert [len(d) for d in datasets.train.datasets] == [samples(18 * 100), samples(300)]
            shards = {record["shard"] for step in range(2) for record in micro_batches(cfg, datasets, step, 0, 1)[1]}
            assert shards <= {"shard-00000", "shard-00001"}
            left_out = [r.getMessage() for r in caplog.records]
            assert datasets.left_out == ({"train": ["shard-00002"], "valid": ["shard-00001", "shard-00002"]}
                                         if evaluate else {"train": ["shard-00002"]})   # result.json, MLflow
            assert any("shard shard-00002: its train part (1 of its 1 documents, 40 tokens)" in m for m in left_out)
            if evaluate:
                assert datasets.valid_shard_ids == [0] and len(datasets.valid) == samples(2 * 100)
                assert any("shard shard-00001: its valid part (0 of its 1 documents, 0 tokens)" in m for m in left_out)
                batches = eval_batches(cfg, datasets, EOD)
                assert batches and all(b.source_ids.shape == b.tokens.shape for b in batches)
            else:
                assert datasets.valid is None and not any("valid part" in m for m in left_out)


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


def test_a_mix_is_read_and_never_applied_twice(manifest_path, tmp_path):
    """Export samples the mix into the shards (SEAMS §4); a manifest that asks the trainer to apply it is refused."""
    folder = copy_shards(manifest_path, tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["mix"] = {"name": "web_heavy", "applied_by": "export", "weights": {"web": 0.6, "code": 0.4}}
    manifest["sha256"] = canonical_sha256(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert load_manifest(folder / "manifest.json").mix["name"] == "web_heavy"
    manifest["mix"]["applied_by"] = "trainer"
    manifest["sha256"] = canonical_sha256(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="blends shards by size only"):
        load_manifest(folder / "manifest.json")


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


def test_batches_do_not_depend_on_how_long_the_run_is(manifest_path, tmp_path):
    lineages = []
    for steps in (5, 500):
        cfg = tiny_config(f"schedule.steps={steps}")
        with open_backend(cfg):
            datasets = build_datasets(cfg, load_manifest(manifest_path), tmp_path / f"cache-{steps}")
            lineages.append([micro_batches(cfg, datasets, step, 0, 1)[1] for step in range(5)])
    assert lineages[0] == lineages[1]   # a short run's batches are the first batches of a long one


def test_each_epoch_visits_every_sample_once_in_its_own_order(manifest_path, tmp_path):
    cfg = tiny_config()
    with open_backend(cfg):
        datasets = build_datasets(cfg, load_manifest(manifest_path), tmp_path / "cache")
    n = len(datasets.train)
    epochs = [[datasets.draw(i)[1:] for i in range(e * n, (e + 1) * n)] for e in range(3)]
    for e, draws in enumerate(epochs):
        assert {epoch for epoch, _ in draws} == {e}
        assert sorted(sample for _, sample in draws) == list(range(n))
    orders = [[sample for _, sample in draws] for draws in epochs]
    assert orders[0] != orders[1] != orders[2]
    assert (epoch_order(cfg.seed, 1, n) == np.random.RandomState((cfg.seed, 1)).permutation(n)).all()


def test_sample_documents_are_the_ones_megatron_reads_the_tokens_from(manifest_path, tmp_path):
    from trainer.data import sample_documents
    cfg = tiny_config()
    manifest = load_manifest(manifest_path)
    with open_backend(cfg):
        datasets = build_datasets(cfg, manifest, tmp_path / "cache")
        for shard_dataset in datasets.train.datasets:
            for sample in range(len(shard_dataset)):
                # megatron's own (private) reader returns the same documents beside the tokens it reads
                _, expected = shard_dataset._query_document_sample_shuffle_indices(sample)
                assert sample_documents(shard_dataset, sample) == expected.tolist()
