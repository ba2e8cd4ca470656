"""jobs.tokens (the tokenize stage): a content-addressed BPE model and gold.tokens."""
import hashlib

from deltalake import DeltaTable

from jobs.config import load_jobs_config
from jobs.text import bpe
from jobs.tokens import TokenizeJob

GOLD = ["doc_id", "url", "source", "language", "tokens", "n_tokens", "tokenizer_sha256", "text_sha256"]


def test_same_sample_same_model_bytes():
    cfg = load_jobs_config(["tokenize.vocab_size=300"]).tokenize
    texts = [f"Document {i}: otters, beavers and herons share the river {i * 7} times.\n" * 20 for i in range(30)]
    first, second = bpe.train_bpe(texts, cfg), bpe.train_bpe(iter(texts), cfg)
    assert first == second
    sp = bpe.processor(first)
    assert sp.eos_id() == cfg.eos_id and sp.pad_id() == cfg.pad_id and sp.bos_id() == -1
    assert sp.decode(sp.encode("Zoë’s otter ☃")) == "Zoë’s otter ☃"  # byte fallback: nothing becomes <unk>
    assert bpe.train_bpe(texts[1:], cfg) != first


def test_model_is_stored_under_its_hash_and_gold_uses_it(pipeline):
    metrics = pipeline.metrics["tokenize"].extra
    digest = metrics["tokenizer_sha256"]
    model = pipeline.tokenizer_dir / digest[:16] / "spm.model"
    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest
    rows = DeltaTable(str(pipeline.lake / "gold" / "tokens")).to_pyarrow_table().to_pylist()
    assert [f.name for f in DeltaTable(str(pipeline.lake / "gold" / "tokens")).schema().fields] == GOLD
    silver = DeltaTable(str(pipeline.lake / "silver" / "documents")).to_pyarrow_table().to_pylist()
    text = {r["doc_id"]: r["text"] for r in silver}
    assert {r["doc_id"] for r in rows} == set(text)
    sp = bpe.processor(model.read_bytes())
    for row in rows:
        assert row["tokenizer_sha256"] == digest and row["n_tokens"] == len(row["tokens"]) > 0
        assert row["tokens"] == sp.encode(text[row["doc_id"]]) and sp.eos_id() not in row["tokens"]


def test_retrain_gives_the_same_hash_and_leaves_gold_alone(pipeline):
    gold = DeltaTable(str(pipeline.lake / "gold" / "tokens"))
    version = gold.version()
    again = TokenizeJob().run(pipeline.args("--full"))
    assert again.extra["tokenizer_sha256"] == pipeline.metrics["tokenize"].extra["tokenizer_sha256"]
    assert again.extra["sample_sha256"] == pipeline.metrics["tokenize"].extra["sample_sha256"]
    assert DeltaTable(str(pipeline.lake / "gold" / "tokens")).version() == version


def test_given_tokenizer_is_reused(pipeline):
    digest = pipeline.metrics["tokenize"].extra["tokenizer_sha256"]
    model = pipeline.tokenizer_dir / digest[:16] / "spm.model"
    reused = TokenizeJob().run(pipeline.args("--tokenizer", str(model)))
    assert reused.extra["tokenizer_sha256"] == digest and "sample_docs" not in reused.extra


def test_overlong_training_lines_are_counted_not_hidden():
    from collections import Counter

    dropped = Counter()
    lines = list(bpe.training_lines(["short line\n\n" + "x" * 100 + "\nlast", None], max_bytes=50, dropped=dropped))
    assert lines == ["short line", "last"]
    assert dropped == Counter(lines=2, lines_too_long=1, bytes_too_long=100)


def test_empty_and_unseen_text_encode_without_unk(pipeline):
    import pyarrow as pa

    from jobs.tokens import encode_arrow

    digest = pipeline.metrics["tokenize"].extra["tokenizer_sha256"]
    model = (pipeline.tokenizer_dir / digest[:16] / "spm.model").read_bytes()
    texts = ["", None, "𓀀 漢字 ☃ Ωmega", "otters <|fim_prefix|>x<|fim_middle|>y<|fim_suffix|>"]
    batch = pa.RecordBatch.from_pydict({"doc_id": list("abcd"), "url": [None] * 4, "source": ["web"] * 4,
                                        "language": ["und"] * 4, "text": texts, "content_sha256": ["h"] * 4})
    (out,) = list(encode_arrow(iter([batch]), model, digest))
    tokens, n_tokens = out.column("tokens").to_pylist(), out.column("n_tokens").to_pylist()
    assert tokens[:2] == [[], []] and n_tokens == [len(t) for t in tokens]
    sp = bpe.processor(model)
    assert sp.unk_id() not in tokens[2] and sp.decode(tokens[2]) == texts[2]  # byte fallback
    fim = [sp.piece_to_id(p) for p in ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")]
    assert sp.unk_id() not in fim and all(i in tokens[3] for i in fim)  # each special token is one piece
    assert out.schema.field("tokens").type == pa.list_(pa.int32())


def test_gold_names_its_tokenizer_in_table_properties(pipeline):
    digest = pipeline.metrics["tokenize"].extra["tokenizer_sha256"]
    properties = DeltaTable(str(pipeline.lake / "gold" / "tokens")).metadata().configuration
    assert properties["weblm.tokenizer.sha256"] == digest
    assert properties["weblm.tokenizer.model"].endswith(f"{digest[:16]}/spm.model")
    assert int(properties["weblm.tokenizer.vocab_size"]) == pipeline.metrics["tokenize"].extra["vocab_size"]


def test_held_back_documents_measure_fertility_and_never_train(pipeline, tmp_path):
    import shutil

    lake = tmp_path / "lake"
    shutil.copytree(pipeline.lake, lake)
    silver = DeltaTable(str(lake / "silver" / "documents")).to_pyarrow_table().to_pylist()
    bucket = {r["doc_id"]: int(hashlib.sha1(r["doc_id"].encode()).hexdigest()[:8], 16) % 1000 for r in silver}
    # doc ids name WARC records, which differ from crawl to crawl: hold back the upper half of this crawl's buckets
    # (a fixed share held back all six documents of one crawl in 1 run out of 64)
    cut = sorted(bucket.values())[len(bucket) // 2]
    assert cut > min(bucket.values())
    args = [a.replace(str(pipeline.lake), str(lake)).replace(str(pipeline.tokenizer_dir), str(tmp_path / "tok"))
            for a in pipeline.args("--full", "-o", f"tokenize.heldout_per_mille={1000 - cut}")]
    metrics = TokenizeJob().run(args).extra
    held = [r for r in silver if bucket[r["doc_id"]] >= cut]
    assert 0 < len(held) < len(silver)
    assert metrics["sample_docs"] == len(silver) - len(held)  # the cap is far away: every other doc trains
    assert metrics["sample_strata"] == {"und/web": metrics["sample_chars"]}
    (language, fertility), = metrics["fertility"].items()
    assert language == "und" and fertility["docs"] == len(held)
    assert fertility["words"] == sum(len(r["text"].split()) for r in held)
    assert fertility["tokens_per_word"] == round(fertility["tokens"] / fertility["words"], 4) > 0
    assert metrics["sample_lines_too_long"] == 0 and metrics["sample_lines"] > 0


def test_a_silver_wholly_held_back_still_trains_a_tokenizer(pipeline, tmp_path, caplog):
    import shutil

    lake = tmp_path / "lake"
    shutil.copytree(pipeline.lake, lake)
    args = [a.replace(str(pipeline.lake), str(lake)).replace(str(pipeline.tokenizer_dir), str(tmp_path / "tok"))
            for a in pipeline.args("--full", "-o", "tokenize.heldout_per_mille=1000")]
    with caplog.at_level("WARNING", logger="weblm.jobs.tokenize"):
        metrics = TokenizeJob().run(args).extra
    silver = DeltaTable(str(lake / "silver" / "documents")).to_pyarrow_table().to_pylist()
    assert "falls in the held-back buckets" in caplog.text and metrics["sample_includes_heldout"] is True
    assert metrics["sample_docs"] == len(silver) > 0
