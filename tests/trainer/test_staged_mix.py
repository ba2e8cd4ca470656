"""A staged mix (a broad mix, then an annealing one; SEAMS §4) is trained in the manifest's order."""
import json
from pathlib import Path

import pytest

from conftest import tiny_config, tmp_paths
from shardkit import build_shards, doc_id_for
from trainer.backend import open_backend
from trainer.data import build_datasets, lineage_record, micro_batches
from trainer.manifest import ManifestError, canonical_sha256, load_manifest


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    return build_shards(tmp_path_factory.mktemp("staged"), n_shards=3, docs_per_shard=40,
                        stages=[("broad", [0, 1]), ("anneal", [2])])


def test_each_stage_is_one_epoch_of_its_own_shards_in_order(staged, tmp_path):
    cfg = tiny_config("schedule.eval_interval=0")
    with open_backend(cfg):
        datasets = build_datasets(cfg, load_manifest(staged), tmp_path / "cache")
        broad, anneal = datasets.stages
        assert (broad.name, anneal.name) == ("broad", "anneal") and datasets.staged
        assert broad.start == 0 and broad.end == anneal.start == len(broad.train) and anneal.end is None
        n = anneal.start + 2 * len(anneal.train)   # the broad epoch, then the last stage twice round
        records = [lineage_record(datasets, i) for i in range(n)]
        assert {r["shard"] for r in records[:anneal.start]} == {"shard-00000", "shard-00001"}
        assert {r["shard"] for r in records[anneal.start:]} == {"shard-00002"}
        assert [r["stage"] for r in records] == ["broad"] * anneal.start + ["anneal"] * (n - anneal.start)
        # every broad sample once, then every anneal sample once per epoch
        seen = [(r["shard"], r["shard_sample"]) for r in records]
        assert len(set(seen[:anneal.start])) == anneal.start
        assert sorted(seen[anneal.start:anneal.start + len(anneal.train)]) == sorted(seen[anneal.start + len(anneal.train):])
        # the batch at a step is the same function of (seed, step) whatever the run's length
        step = anneal.start // cfg.batch.global_batch_size + 1
        assert micro_batches(cfg, datasets, step, 0, 1)[1] == records[step * 16:(step + 1) * 16]


def test_a_stage_list_that_loses_a_shard_is_refused(staged, tmp_path):
    raw = json.loads(staged.read_text())
    raw["stages"] = raw["stages"][:1]
    raw["sha256"] = canonical_sha256(raw)
    copy = staged.parent / "manifest-lost.json"
    copy.write_text(json.dumps(raw))
    with pytest.raises(ManifestError, match="every shard exactly once"):
        load_manifest(copy)


def test_a_staged_run_reports_its_stages_and_names_its_documents(staged, tmp_path):
    from trainer.provenance import documents_seen
    from trainer.train import train

    cfg, paths = tiny_config("schedule.steps=12", "schedule.eval_interval=0", "schedule.checkpoint_interval=12",
                             "lineage.detail=digest"), tmp_paths(tmp_path)
    result = train(cfg, paths, staged, Path(paths.train_dir))
    stages = {s["stage"]: s for s in result["stages"]}
    assert stages["broad"]["first_step"] == 0 and 0 < stages["anneal"]["first_step"] < 12
    _, seen = documents_seen(result["checkpoint"])   # every step recomputed and checked against its digest
    shard_of = {doc_id_for(k, i): k for k in range(3) for i in range(40)}
    shards = {shard_of[d.doc_id] for d in seen}
    assert shards == {0, 1, 2}   # both broad shards, then the annealing one
    assert min(d.first_step for d in seen if shard_of[d.doc_id] == 2) == stages["anneal"]["first_step"]
