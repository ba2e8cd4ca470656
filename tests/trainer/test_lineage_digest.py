"""lineage.detail=digest: one short line per step, and trainer.provenance recomputes the documents from the
shards and checks them against what training logged."""
import json

import pytest

from conftest import tiny_config, tmp_paths
from test_provenance import lineage_docs
from trainer.checkpoint import CheckpointError
from trainer.provenance import documents_seen
from trainer.train import train


@pytest.fixture(scope="module")
def digest_run(tmp_path_factory, manifest_path):
    """The shared 40-step run (trained_run, lineage.detail=full) again, logging digests only."""
    root = tmp_path_factory.mktemp("digest-run")
    cfg, paths = tiny_config("schedule.steps=40", "lineage.detail=digest"), tmp_paths(root)
    train(cfg, paths, manifest_path)
    return root / "train"


def test_a_digest_line_is_short_and_names_the_batch(digest_run, trained_run):
    digest_lines = (digest_run / "lineage" / "batches.jsonl").read_text().splitlines()
    full_lines = (trained_run["out"] / "lineage" / "batches.jsonl").read_text().splitlines()
    assert len(digest_lines) == len(full_lines) == 40
    digest, full = json.loads(digest_lines[7]), json.loads(full_lines[7])
    assert set(digest) == {"step", "batch", "samples_in_batch", "digest"}
    assert digest == {k: full[k] for k in digest}          # the same batch, the same digest as the full record's
    assert sum(map(len, digest_lines)) * 20 < sum(map(len, full_lines))


def test_the_documents_are_recomputed_and_checked(digest_run, trained_run):
    _, seen = documents_seen(digest_run / "checkpoints" / "step-00000040")
    assert {d.doc_id: d.samples for d in seen} == lineage_docs(trained_run["out"], 40)
    assert all(d.url for d in seen)


def test_a_batch_that_no_longer_matches_its_digest_is_an_error(digest_run, tmp_path, caplog):
    lineage = digest_run / "lineage" / "batches.jsonl"
    lines = lineage.read_text().splitlines()
    tampered = [json.loads(line) for line in lines]
    tampered[12]["digest"] = "0" * 64
    altered = tmp_path / "batches.jsonl"
    altered.write_text("".join(json.dumps(r) + "\n" for r in tampered))
    with pytest.raises(CheckpointError, match=r"steps \[12\] do not match the digests"):
        documents_seen(digest_run / "checkpoints" / "step-00000040", lineage=altered)
    with caplog.at_level("WARNING"):
        _, seen = documents_seen(digest_run / "checkpoints" / "step-00000040", lineage=tmp_path / "absent.jsonl")
    assert seen and "without a check against what training logged" in caplog.text
