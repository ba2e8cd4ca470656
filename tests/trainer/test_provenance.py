"""A checkpoint names the documents it was trained on (trainer/provenance.py)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.manifest import ManifestError
from trainer.provenance import documents_seen

ROOT = Path(__file__).resolve().parents[2]


def lineage_docs(out: Path, before_step: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (out / "lineage" / "batches.jsonl").read_text().splitlines():
        batch = json.loads(line)
        if batch["step"] < before_step:
            for sample in batch["samples"]:
                for doc_id in set(sample["doc_ids"]):
                    counts[doc_id] = counts.get(doc_id, 0) + 1
    return counts


def test_a_checkpoint_names_exactly_the_documents_of_its_steps(trained_run):
    out = trained_run["out"]
    mid, last = out / "checkpoints" / "step-00000020", out / "checkpoints" / "step-00000040"
    _, seen_mid = documents_seen(mid)
    _, seen_last = documents_seen(last)

    assert {d.doc_id: d.samples for d in seen_mid} == lineage_docs(out, 20)
    assert {d.doc_id: d.samples for d in seen_last} == lineage_docs(out, 40)
    assert {d.doc_id for d in seen_mid} <= {d.doc_id for d in seen_last}
    assert all(d.first_step < 20 for d in seen_mid)
    # every doc_id resolves to the URL the export job wrote beside the shard
    sidecars = {}
    for docs in Path(trained_run["manifest"]).parent.glob("*.docs.jsonl"):
        sidecars.update((r["doc_id"], r["url"]) for r in map(json.loads, docs.read_text().splitlines()))
    assert all(d.url == sidecars[d.doc_id] and d.url for d in seen_last)


def test_cli_writes_one_line_per_document(trained_run, tmp_path):
    checkpoint = trained_run["out"] / "checkpoints" / "step-00000040"
    listing = tmp_path / "seen.jsonl"
    proc = subprocess.run([sys.executable, "-m", "trainer.provenance", str(checkpoint), "--out", str(listing)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in listing.read_text().splitlines()]
    assert len(rows) == len(lineage_docs(trained_run["out"], 40))
    assert f"saw {len(rows)} documents" in proc.stdout


def test_a_changed_manifest_is_refused(trained_run, tmp_path):
    import shutil
    import torch
    from trainer import checkpoint

    run = tmp_path / "run"
    shutil.copytree(trained_run["out"] / "lineage", run / "lineage")
    # the sharded checkpoint's common state says another manifest, published again whole (fresh SHA256SUMS)
    staged = run / "checkpoints" / "step-00000040.partial"
    shutil.copytree(trained_run["out"] / "checkpoints" / "step-00000040", staged)
    (staged / checkpoint.SUMS).unlink()
    payload = torch.load(staged / checkpoint.COMMON, weights_only=False)
    payload["meta"]["manifest_sha256"] = "0" * 64
    torch.save(payload, staged / checkpoint.COMMON)
    checkpoint._publish(staged, run / "checkpoints" / "step-00000040", keep=None)
    with pytest.raises(ManifestError, match="has changed since"):
        documents_seen(run / "checkpoints" / "step-00000040")


def test_one_steps_documents_are_recomputed_without_the_lineage_file(trained_run, tmp_path):
    checkpoint = trained_run["out"] / "checkpoints" / "step-00000040"
    recorded = {json.loads(line)["step"]: json.loads(line)["samples"]
                for line in (trained_run["out"] / "lineage" / "batches.jsonl").read_text().splitlines()}
    out = tmp_path / "step7.jsonl"
    proc = subprocess.run([sys.executable, "-m", "trainer.provenance", str(checkpoint), "--step", "7",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "urls"} for r in rows] == recorded[7]
    sidecars = {}
    for docs in Path(trained_run["manifest"]).parent.glob("*.docs.jsonl"):
        sidecars.update((r["doc_id"], r["url"]) for r in map(json.loads, docs.read_text().splitlines()))
    assert all(r["urls"] == [sidecars[d] for d in r["doc_ids"]] for r in rows)
    late = subprocess.run([sys.executable, "-m", "trainer.provenance", str(checkpoint), "--step", "40"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert late.returncode == 2 and "steps 0..39 trained it, not 40" in late.stderr
