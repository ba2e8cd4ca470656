"""SentencePiece BPE: train from an iterator of texts, store content-addressed, encode.

Training reads sentences from an iterator and writes the model to memory, so the model bytes
depend only on the sample and the settings (no temp-file names in the trainer spec): the same
sample gives the same bytes, and sha256(model bytes) is the tokenizer's identity.
"""
from __future__ import annotations

import hashlib
import io
from collections import Counter
from typing import Iterable, Iterator

import sentencepiece as spm

import storage
from jobs.config import TokenizeSettings

MODEL_FILE = "spm.model"
_loaded: dict[str, spm.SentencePieceProcessor] = {}  # one processor per model, per Python worker


def training_lines(texts: Iterable[str], max_bytes: int = 0, dropped: Counter | None = None) -> Iterator[str]:
    """Documents -> non-empty lines: SentencePiece trains on sentences.  Lines over `max_bytes` UTF-8 bytes,
    which SentencePiece would skip with a log line nobody sees, are dropped here and counted in `dropped`."""
    for text in texts:
        for line in (text or "").splitlines():
            if not line.strip():
                continue
            size = len(line.encode("utf-8")) if max_bytes else 0
            if max_bytes and size > max_bytes:
                if dropped is not None:
                    dropped["lines_too_long"] += 1
                    dropped["bytes_too_long"] += size
                continue
            if dropped is not None:
                dropped["lines"] += 1
            yield line


def train_bpe(texts: Iterable[str], cfg: TokenizeSettings, dropped: Counter | None = None) -> bytes:
    """A BPE model trained on `texts`, as bytes; `dropped` counts the lines used and the overlong ones left out."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=training_lines(texts, cfg.max_sentence_length, dropped), model_writer=model,
        model_type="bpe", user_defined_symbols=list(cfg.special_tokens),
        vocab_size=cfg.vocab_size, hard_vocab_limit=False, byte_fallback=cfg.byte_fallback,
        character_coverage=cfg.character_coverage, normalization_rule_name=cfg.normalization_rule_name,
        remove_extra_whitespaces=cfg.remove_extra_whitespaces, split_digits=cfg.split_digits,
        max_sentence_length=cfg.max_sentence_length, pad_id=cfg.pad_id, unk_id=cfg.unk_id,
        eos_id=cfg.eos_id, bos_id=cfg.bos_id, num_threads=cfg.num_threads,
        shuffle_input_sentence=False, input_sentence_size=0, minloglevel=2)
    return model.getvalue()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_path(tokenizer_dir: str, digest: str, prefix_len: int) -> str:
    """`<tokenizer_dir>/<sha256 prefix>/spm.model`: a local path or a URI, like `tokenizer_dir`."""
    return storage.join(tokenizer_dir, digest[:prefix_len], MODEL_FILE)


def save_model(model: bytes, tokenizer_dir: str, prefix_len: int) -> str:
    """Write the model to its content-addressed place, all-or-nothing; an existing copy is reused."""
    digest = sha256_hex(model)
    path = model_path(tokenizer_dir, digest, prefix_len)
    if storage.exists(path):
        if sha256_hex(storage.read_bytes(path)) != digest:
            raise RuntimeError(f"{path} exists with other content than sha256 {digest}; remove it and rerun")
        return path
    storage.write_bytes(path, model)
    return path


def load_model(tokenizer_dir: str, digest: str, prefix_len: int) -> tuple[str, bytes]:
    """The model with this sha256 from `tokenizer_dir`, checked; a clear error when it is missing or altered."""
    path = model_path(tokenizer_dir, digest, prefix_len)
    if not storage.exists(path):
        raise FileNotFoundError(f"tokenizer {digest[:12]}… is missing at {path}; rerun jobs.tokens (with --full "
                                "to train a new one) or restore the model")
    model = storage.read_bytes(path)
    if sha256_hex(model) != digest:
        raise ValueError(f"{path} has sha256 {sha256_hex(model)[:12]}…, expected {digest[:12]}…")
    return path, model


def processor(model: bytes, digest: str | None = None) -> spm.SentencePieceProcessor:
    """A loaded model, cached by content hash: loaded once per Python worker."""
    digest = digest or sha256_hex(model)
    if digest not in _loaded:
        _loaded[digest] = spm.SentencePieceProcessor(model_proto=model)
    return _loaded[digest]


def model_info(model: bytes) -> dict:
    sp = processor(model)
    return {"vocab_size": sp.get_piece_size(), "eod_id": sp.eos_id(), "pad_id": sp.pad_id(),
            "unk_id": sp.unk_id(), "bos_id": sp.bos_id()}
