"""jobs.export: Megatron indexed shards + manifest (SEAMS §4), written by the executors, checked before a
manifest exists, read back by megatron-core's IndexedDataset and GPTDataset."""
import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable

from jobs.export import ExportJob, ExportValidationError, canonical_sha256
from jobs.tokens import TokenizeJob
from jobs.shard_writer import ShardWriter, assign_shards, content_name, shard_window, token_dtype, validate_shard
from shard_readback import gpt_samples_match, indexed_documents

SHARD_NAME = re.compile(r"^shard-\d{5}-[0-9a-f]{16}$")


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(path):
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def test_placement_goes_by_the_window_of_each_first_token():
    assert assign_shards([3, 3, 3, 3, 3], 8) == [0, 0, 0, 1, 1]   # starts 0 3 6 | 9 12
    assert assign_shards([20, 1, 1], 8) == [0, 1, 1]              # windows 1 and 2 hold no first token: skipped
    assert assign_shards([], 10) == []
    assert shard_window(100, 10) == 10 and shard_window(100, 10, max_shards=4) == 25


def test_shards_read_back_with_eod_and_gold_tokens(pipeline, tmp_path):
    manifest = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    eod, vocab = manifest["tokenizer"]["eod_id"], manifest["tokenizer"]["vocab_size"]
    gold = {r["doc_id"]: r for r in rows(pipeline.lake / "gold" / "tokens")}
    seen = []
    assert len(manifest["shards"]) >= 2  # the fixture is cut into several shards
    for shard in manifest["shards"]:
        prefix = str(pipeline.shards_dir / shard["prefix"])
        documents = indexed_documents(prefix)
        docs = [json.loads(line) for line in (pipeline.shards_dir / shard["docs"]).read_text().splitlines()]
        assert len(documents) == shard["documents"] == len(docs)
        assert sum(map(len, documents)) == shard["tokens"]
        for i, (doc, tokens) in enumerate(zip(docs, documents)):
            assert doc["i"] == i and doc["n_tokens"] == gold[doc["doc_id"]]["n_tokens"] == len(tokens) - 1
            assert tokens[-1] == eod and tokens[:-1] == gold[doc["doc_id"]]["tokens"]
            seen.append(doc["doc_id"])
        assert gpt_samples_match(prefix, vocab, eod, 32, str(tmp_path / "cache")) > 0
    assert sorted(seen) == sorted(gold)  # every document once (the natural mix), in the shuffled order
    assert seen != sorted(seen)


def test_manifest_matches_files_tables_and_tokenizer(pipeline):
    manifest = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    assert manifest["format"] == "megatron-indexed/1" and manifest["dtype"] == "uint16"
    assert manifest["sha256"] == canonical_sha256(manifest)
    for shard in manifest["shards"]:
        assert SHARD_NAME.match(shard["prefix"])
        files = [sha(pipeline.shards_dir / (shard["prefix"] + s)) for s in (".bin", ".idx", ".docs.jsonl")]
        assert files == [shard["bin_sha256"], shard["idx_sha256"], shard["docs_sha256"]]
        assert shard["prefix"] == content_name(int(shard["prefix"][6:11]), *files)  # named by its content
    for name, layer in (("gold.tokens", "gold/tokens"), ("silver.documents", "silver/documents"),
                        ("bronze.pages", "bronze/pages")):
        assert manifest["sources"][name]["version"] == DeltaTable(str(pipeline.lake / layer)).version()
    tokenizer = manifest["tokenizer"]
    assert sha(pipeline.tokenizer_dir / tokenizer["sha256"][:16] / "spm.model") == tokenizer["sha256"]
    assert tokenizer["model"].endswith(f"{tokenizer['sha256'][:16]}/spm.model")
    assert (tokenizer["eod_id"], tokenizer["pad_id"], tokenizer["type"]) == (2, 0, "sentencepiece-bpe")
    gold = rows(pipeline.lake / "gold" / "tokens")
    assert manifest["totals"] == {"documents": len(gold), "tokens": sum(r["n_tokens"] + 1 for r in gold)}
    assert manifest["mix"]["applied_by"] == "export" and manifest["mix"]["name"] == "natural"
    assert all(r["share"] == r["target_share"] for r in manifest["mix"]["realized"].values())
    assert not (pipeline.shards_dir / "_staging").exists()


def test_lineage_leads_from_each_sequence_to_its_warc_record(pipeline):
    manifest = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    lineage = {(r["shard"], r["i"]): r for r in rows(pipeline.lake / "gold" / "shard_lineage")}
    assert manifest["lineage"]["version"] == DeltaTable(str(pipeline.lake / "gold" / "shard_lineage")).version()
    silver = {r["doc_id"]: r for r in rows(pipeline.lake / "silver" / "documents")}
    assert len(lineage) == manifest["totals"]["documents"]
    for shard in manifest["shards"]:
        for line in (pipeline.shards_dir / shard["docs"]).read_text().splitlines():
            doc = json.loads(line)
            row = lineage[(shard["prefix"], doc["i"])]
            assert row["doc_id"] == doc["doc_id"] and row["url"] == silver[doc["doc_id"]]["url"]
            assert (row["warc_file"], row["warc_offset"]) == (silver[doc["doc_id"]]["warc_file"],
                                                              silver[doc["doc_id"]]["warc_offset"])


def test_rerun_is_byte_identical(pipeline):
    before = {p.name: sha(p) for p in pipeline.shards_dir.iterdir()}
    ExportJob().run(pipeline.args())
    after = {p.name: sha(p) for p in pipeline.shards_dir.iterdir()}
    assert after == before and "manifest.json" in after


def export_to(pipeline, out, *extra):
    args = [a.replace(str(pipeline.shards_dir), str(out)) for a in pipeline.args()]
    return ExportJob().run(args + ["-o", "export.lineage_table=gold.lineage_scratch", *extra])


def test_the_same_seed_gives_the_same_shards_another_seed_another_order(pipeline, tmp_path):
    first = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    export_to(pipeline, tmp_path / "again", "--full")
    again = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert again["shards"] == first["shards"]
    export_to(pipeline, tmp_path / "other", "-o", "export.shuffle_seed=7")
    other = json.loads((tmp_path / "other" / "manifest.json").read_text())
    assert other["totals"] == first["totals"] and other["shards"] != first["shards"]


def test_fewer_shards_replace_the_old_ones(pipeline, tmp_path):
    out = tmp_path / "shards"
    export_to(pipeline, out)
    export_to(pipeline, out, "-o", "export.max_shards=1", "-o", "export.target_tokens_per_shard=1")
    manifest = json.loads((out / "manifest.json").read_text())
    (prefix,) = [s["prefix"] for s in manifest["shards"]]
    assert prefix.startswith("shard-00000-")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] + sorted(
        prefix + s for s in (".bin", ".docs.jsonl", ".idx"))


OTTER_RULES = ("-o", 'export.mix.rules=[{source: otters, url_pattern: "otters\\\\.weblm"}]')


def lake_copy(pipeline, tmp_path) -> tuple[Path, list[str]]:
    """A copy of the pipeline's lake, and job arguments that read and write it (shards in tmp_path/shards)."""
    lake = tmp_path / "lake"
    shutil.copytree(pipeline.lake, lake)
    return lake, [a.replace(str(pipeline.lake), str(lake)).replace(str(pipeline.shards_dir), str(tmp_path / "shards"))
                  for a in pipeline.args()]


@pytest.fixture(scope="module")
def otter_lake(pipeline, tmp_path_factory):
    """The pipeline's lake with otters.weblm.test tagged `otters` by a new rule: tokenize re-tags, never re-encodes."""
    tmp_path = tmp_path_factory.mktemp("otters")
    lake, args = lake_copy(pipeline, tmp_path)
    before = {r["doc_id"]: r for r in rows(lake / "gold" / "tokens")}
    metrics = TokenizeJob().run(args + list(OTTER_RULES))
    after = {r["doc_id"]: r for r in rows(lake / "gold" / "tokens")}
    return {"lake": lake, "args": args, "before": before, "after": after, "metrics": metrics, "tmp": tmp_path}


def test_new_source_rules_retag_gold_without_encoding_again(otter_lake):
    before, after, metrics = otter_lake["before"], otter_lake["after"], otter_lake["metrics"]
    otters = {d for d, r in after.items() if "otters.weblm.test" in r["url"]}
    assert otters and metrics.extra["retagged"] == len(otters) and metrics.input_rows == len(otters)
    assert all(before[d]["source"] == "web" for d in otters) and all(after[d]["source"] == "otters" for d in otters)
    assert all(after[d]["tokens"] == before[d]["tokens"] and after[d]["language"] == before[d]["language"]
               for d in after)
    again = TokenizeJob().run(otter_lake["args"] + list(OTTER_RULES))   # the same rules again: nothing to do
    assert again.extra["retagged"] == 0
    assert {r["doc_id"]: r for r in rows(otter_lake["lake"] / "gold" / "tokens")} == after


def test_a_weighted_mix_samples_sources_by_hash_and_reports_the_realized_mix(otter_lake):
    """otters.weblm.test is tagged `otters` by a rule; a mix asking for 3/4 otters up-samples them."""
    out = otter_lake["tmp"] / "mixed"
    args = [a.replace(str(otter_lake["tmp"] / "shards"), str(out)) for a in otter_lake["args"]]
    metrics = ExportJob().run(args + ["-o", "export.lineage_table=gold.lineage_scratch",
                                      "-o", "export.mix.name=otter_heavy",
                                      "-o", "export.mix.mixes={otter_heavy: {otters: 3, web: 1}}"])
    manifest = json.loads((out / "manifest.json").read_text())
    realized = manifest["mix"]["realized"]
    assert realized["otters"]["target_share"] == 0.75 and manifest["mix"] == metrics.extra["mix"]
    assert realized["otters"]["share"] > realized["otters"]["input_tokens"] / sum(
        r["input_tokens"] for r in realized.values())
    sequences = [json.loads(line) for s in manifest["shards"] for line in (out / s["docs"]).read_text().splitlines()]
    copies = {}
    for doc in sequences:
        assert (doc["source"] == "otters") == ("otters.weblm.test" in doc["url"])
        copies.setdefault(doc["doc_id"], []).append(doc["copy"])
    assert all(sorted(c) == list(range(len(c))) for c in copies.values())  # copy 0..k-1, each once
    assert max(len(c) for c in copies.values()) >= 2  # up-sampled


def test_a_two_stage_mix_writes_each_stage_its_own_shards_in_order(otter_lake, spark):
    """A broad natural mix for 3/4 of the tokens, then an annealing mix of otters only for the last 1/4."""
    out = otter_lake["tmp"] / "staged"
    args = [a.replace(str(otter_lake["tmp"] / "shards"), str(out)) for a in otter_lake["args"]]
    ExportJob().run(args + ["-o", "export.lineage_table=gold.lineage_staged", "-o", "export.mix.name=broad_then_otters",
                            "-o", "export.mix.mixes={natural: {}, otters_only: {otters: 1}}",
                            "-o", "export.mix.schedules={broad_then_otters: [{stage: broad, mix: natural, share: 3},"
                                  " {stage: anneal, mix: otters_only, share: 1}]}"])
    manifest = json.loads((out / "manifest.json").read_text())
    broad, anneal = manifest["stages"]
    assert (broad["name"], anneal["name"]) == ("broad", "anneal") and broad["shards"] and anneal["shards"]
    prefixes = [s["prefix"] for s in manifest["shards"]]
    assert prefixes == broad["shards"] + anneal["shards"]   # the stages' shards, in training order
    assert [s["stage"] for s in manifest["shards"]] == ["broad"] * len(broad["shards"]) + ["anneal"] * len(anneal["shards"])
    for shard in manifest["shards"]:
        sources = {json.loads(line)["source"] for line in (out / shard["docs"]).read_text().splitlines()}
        assert sources == {"otters"} if shard["stage"] == "anneal" else sources <= {"web", "otters"}
    mix = manifest["mix"]
    # each document is sampled on its own (test_mixing checks that the copies average the rate over many): here,
    # every otters document has floor(r) or floor(r) + 1 copies in the anneal stage, so the stage misses its
    # quarter of the input's tokens by less than one copy of each otters document
    in_tokens = {s: r["input_tokens"] for s, r in mix["stages"][1]["realized"].items()}
    rate = mix["stages"][1]["rates"]["otters"]
    copies = {d: 0 for d, r in otter_lake["after"].items() if r["source"] == "otters"}
    for shard in manifest["shards"]:
        if shard["stage"] == "anneal":
            for line in (out / shard["docs"]).read_text().splitlines():
                copies[json.loads(line)["doc_id"]] += 1
    assert set(copies.values()) <= {math.floor(rate), math.floor(rate) + 1}
    assert abs(anneal["tokens"] - 0.25 * sum(in_tokens.values())) < in_tokens["otters"]
    assert mix["name"] == "broad_then_otters" and [s["stage"] for s in mix["stages"]] == ["broad", "anneal"]
    assert mix["stages"][1]["realized"]["otters"]["share"] == 1.0 and "realized" not in mix
    lineage = spark.read.format("delta").load(str(otter_lake["lake"] / "gold" / "lineage_staged"))
    by_stage = {r["stage"]: r["n"] for r in lineage.groupBy("stage").count().withColumnRenamed("count", "n").collect()}
    assert by_stage == {"broad": broad["documents"], "anneal": anneal["documents"]}


def with_one_gold_row_changed(pipeline, spark, tmp_path, assignments: str):
    """A copy of the pipeline's lake with `SET assignments` applied to one gold row; export arguments for it."""
    lake, args = lake_copy(pipeline, tmp_path)
    gold = lake / "gold" / "tokens"
    doc_id = sorted(r["doc_id"] for r in rows(gold))[0]
    spark.sql(f"UPDATE delta.`{gold}` SET {assignments} WHERE doc_id = '{doc_id}'")
    return gold, args


def test_a_failed_check_writes_no_manifest_and_says_why(pipeline, spark, tmp_path):
    gold, args = with_one_gold_row_changed(pipeline, spark, tmp_path, "n_tokens = n_tokens + 1")
    with pytest.raises(ExportValidationError, match="gold's n_tokens disagrees with its tokens"):
        ExportJob().run(args)
    assert not (tmp_path / "shards" / "manifest.json").exists()


def test_an_empty_document_is_counted_and_left_out(pipeline, spark, tmp_path):
    gold, args = with_one_gold_row_changed(pipeline, spark, tmp_path, "n_tokens = 0, tokens = array()")
    metrics = ExportJob().run(args)
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert metrics.skipped["empty_document"] == 1
    assert manifest["totals"]["documents"] == len(rows(gold)) - 1
    assert manifest["totals"]["tokens"] == sum(r["n_tokens"] + 1 for r in rows(gold) if r["n_tokens"])


def test_validation_finds_ids_outside_the_vocabulary_and_damaged_files(tmp_path):
    writer = ShardWriter(str(tmp_path), 3, token_dtype(100), 2, 100)
    writer.add("a", None, "web", 0, [5, 6, 150])
    entry = writer.close()
    problems = validate_shard(str(tmp_path), entry, 100, 2, token_dtype(100))
    assert any("outside [0, 100)" in p for p in problems) and any(">= vocabulary size 100" in p for p in problems)
    good = ShardWriter(str(tmp_path), 4, token_dtype(100), 2, 100)
    good.add("b", None, "web", 0, [5, 6])
    entry = good.close()
    assert validate_shard(str(tmp_path), entry, 100, 2, token_dtype(100)) == []
    (tmp_path / (entry["prefix"] + ".bin")).write_bytes(np.array([5, 6, 9], dtype=np.uint16).tobytes())
    problems = validate_shard(str(tmp_path), entry, 100, 2, token_dtype(100))
    assert any("sha256 differs" in p for p in problems) and any("do not end with EOD" in p for p in problems)


def test_bad_input_empty_huge_and_int32_documents_round_trip(tmp_path):
    """An empty document is a lone EOD, a document longer than any sequence spans samples, and a vocabulary
    of 70,000 needs int32: megatron-core reads each back exactly."""
    vocab = 70_000
    dtype = token_dtype(vocab)
    assert np.dtype(dtype) == np.int32 and np.dtype(token_dtype(65_499)) == np.uint16
    docs = [[], list(range(3, 3 + 5_000)), [69_999, 65_536, 65_535], [7]]
    writer = ShardWriter(str(tmp_path), 0, dtype, 2, vocab)
    for k, doc in enumerate(docs):
        writer.add(f"d{k}", None, "web", 0, doc)
    entry = writer.close()
    assert validate_shard(str(tmp_path), entry, vocab, 2, dtype) == []
    prefix = str(tmp_path / entry["prefix"])
    assert indexed_documents(prefix) == [d + [2] for d in docs]
    assert gpt_samples_match(prefix, vocab, 2, 64, str(tmp_path / "cache")) == (sum(len(d) + 1 for d in docs) - 1) // 64


class WideVocabExport(ExportJob):
    """The pipeline's tokenizer as if its vocabulary were 70,000 ids: export must switch to int32 shards."""

    def tokenizer_entry(self, digest):
        return {**super().tokenizer_entry(digest), "vocab_size": 70_000}


def test_a_vocabulary_past_uint16_exports_int32_shards_megatron_reads_back(pipeline, tmp_path):
    out = tmp_path / "wide"
    args = [a.replace(str(pipeline.shards_dir), str(out)) for a in pipeline.args()]
    WideVocabExport().run(args + ["-o", "export.lineage_table=gold.lineage_wide"])
    manifest = json.loads((out / "manifest.json").read_text())
    narrow = json.loads((pipeline.shards_dir / "manifest.json").read_text())
    assert manifest["dtype"] == "int32" and narrow["dtype"] == "uint16"
    assert manifest["totals"] == narrow["totals"]
    wide_docs = [d for s in manifest["shards"] for d in indexed_documents(str(out / s["prefix"]))]
    narrow_docs = [d for s in narrow["shards"] for d in indexed_documents(str(pipeline.shards_dir / s["prefix"]))]
    assert wide_docs == narrow_docs   # the same tokens, twice the bytes
    assert sum((out / f"{s['prefix']}.bin").stat().st_size for s in manifest["shards"]) == 4 * manifest["totals"]["tokens"]
    prefix = str(out / manifest["shards"][0]["prefix"])
    assert gpt_samples_match(prefix, 70_000, manifest["tokenizer"]["eod_id"], 16, str(tmp_path / "cache")) > 0
