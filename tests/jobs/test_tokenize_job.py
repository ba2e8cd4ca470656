"""jobs.tokenize: a content-addressed BPE model and gold.tokens."""
import hashlib

from deltalake import DeltaTable

from jobs.config import load_jobs_config
from jobs.text import bpe
from jobs.tokenize import TokenizeJob

GOLD = ["doc_id", "url", "tokens", "n_tokens", "tokenizer_sha256", "text_sha256"]


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
