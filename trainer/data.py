"""Shards → megatron GPTDatasets → the global batch of each step, and which documents fed it.

Batch order (OLMo-core): the global batch of step s is samples [s·G, (s+1)·G) of the blended
training dataset, whose order megatron derives from `seed` alone.  So a batch is a pure
function of (seed, step): a resumed run draws exactly the batches the killed one would have,
and a data-parallel rank takes `batch[dp_rank::dp]`, so the global batch does not depend on dp.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer

from trainer.config import TrainerConfig
from trainer.manifest import Manifest, ManifestError, read_doc_ids


class ManifestTokenizer(MegatronLegacyTokenizer):
    """The tokenizer facts GPTDataset needs (vocab size, EOD) for shards that are already tokenized."""

    def __init__(self, manifest: Manifest):
        # The tokenizer sha and ids enter megatron's cache key, so a new tokenizer never reuses old indices.
        super().__init__(manifest.tokenizer_sha256, vocab_size=manifest.vocab_size, eod=manifest.eod_id)
        self._vocab_size = manifest.vocab_size
        self._eod = manifest.eod_id

    def tokenize(self, text: str) -> np.ndarray:
        raise NotImplementedError("shards are pre-tokenized by the jobs; the trainer never tokenizes text")

    @property
    def vocab(self):
        raise NotImplementedError("the trainer reads token ids only; see the SentencePiece model in the manifest")

    @property
    def inv_vocab(self):
        raise NotImplementedError("the trainer reads token ids only; see the SentencePiece model in the manifest")

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def eod(self) -> int:
        return self._eod

    # No `pad`: GPTDataset masks every label equal to the pad id, and the manifest's pad_id (0) can be a
    # real token (SentencePiece's <unk>); without it GPTDataset pads with -1, which never occurs in shards.


class LineageGPTDataset(GPTDataset):
    """GPTDataset that also returns the sequence indices (documents) each sample's tokens came from.

    megatron computes them in `_query_document_sample_shuffle_indices` and drops them in `__getitem__`.
    """

    def _query_document_sample_shuffle_indices(self, idx):
        tokens, document_ids = super()._query_document_sample_shuffle_indices(idx)
        self._last_document_ids = document_ids
        return tokens, document_ids

    def __getitem__(self, idx):
        sample = super().__getitem__(idx)
        sample["document_ids"] = torch.from_numpy(self._last_document_ids)
        return sample


@dataclass
class Batch:
    tokens: torch.Tensor           # [b, s]
    labels: torch.Tensor           # [b, s]
    loss_mask: torch.Tensor        # [b, s] float
    position_ids: torch.Tensor     # [b, s]
    attention_mask: torch.Tensor | None   # [b, 1, s, s] bool, True = masked; None = plain causal


@dataclass
class Datasets:
    train: BlendedDataset
    valid: BlendedDataset | None
    doc_ids: list[list[str]]       # per shard (= blended dataset id): doc_id of each sequence
    shard_names: list[str]


def dataset_config(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path) -> GPTDatasetConfig:
    prefixes = [s.prefix for s in manifest.shards]
    weights = [float(s.tokens) for s in manifest.shards]
    return GPTDatasetConfig(
        random_seed=cfg.seed,
        sequence_length=cfg.model.seq_length,
        blend=(prefixes, weights),
        split=cfg.data.split,
        path_to_cache=str(cache_dir),
        tokenizer=ManifestTokenizer(manifest),
        reset_position_ids=cfg.data.reset_position_ids,
        reset_attention_mask=cfg.data.reset_attention_mask,
        eod_mask_loss=cfg.data.eod_mask_loss,
        create_attention_mask=cfg.data.reset_attention_mask,  # only document masks need an explicit s×s mask
    )


def build_datasets(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path) -> Datasets:
    """One LineageGPTDataset per shard, blended by token count (megatron's builder), train and valid."""
    G = cfg.batch.global_batch_size
    eval_samples = cfg.schedule.eval_batches * G if cfg.schedule.eval_interval > 0 else 0
    _check_valid_split(cfg, manifest, eval_samples)
    gpt_config = dataset_config(cfg, manifest, cache_dir)
    train, valid, _ = BlendedMegatronDatasetBuilder(
        LineageGPTDataset, [cfg.schedule.steps * G, eval_samples, 0], lambda: True, gpt_config).build()
    return Datasets(train=train, valid=valid if eval_samples else None,
                    doc_ids=[read_doc_ids(s) for s in manifest.shards],
                    shard_names=[s.name for s in manifest.shards])


def _check_valid_split(cfg: TrainerConfig, manifest: Manifest, eval_samples: int) -> None:
    if not eval_samples:
        return
    shares = [float(x) for x in cfg.data.split.split(",")]
    lo, hi = shares[0] / sum(shares), (shares[0] + shares[1]) / sum(shares)
    for shard in manifest.shards:
        # Same rounding as megatron's builder: a shard whose valid slice rounds to no documents cannot evaluate.
        if int(round(hi * shard.documents)) - int(round(lo * shard.documents)) < 1:
            raise ManifestError(f"shard {shard.name} has {shard.documents} documents: data.split {cfg.data.split!r} "
                                "leaves it no validation document; raise the valid share or set "
                                "schedule.eval_interval=0")


def global_batch_indices(step: int, global_batch_size: int) -> list[int]:
    """Blended-dataset sample indices of step `step`'s global batch (0-based step)."""
    return list(range(step * global_batch_size, (step + 1) * global_batch_size))


def rank_slice(indices: list[int], dp_rank: int, dp: int) -> list[int]:
    """This data-parallel rank's share of a global batch: strided, so the global batch is dp-independent."""
    return indices[dp_rank::dp]


def collate(samples: list[dict[str, Any]]) -> Batch:
    # Hand-stacked rather than torch's default_collate: samples carry ragged document_ids for lineage.
    stack = lambda key: torch.stack([s[key] for s in samples])
    mask = stack("attention_mask") if "attention_mask" in samples[0] else None
    return Batch(tokens=stack("tokens"), labels=stack("labels"), loss_mask=stack("loss_mask").float(),
                 position_ids=stack("position_ids"), attention_mask=mask)


def lineage_record(datasets: Datasets, index: int, sample: dict[str, Any]) -> dict[str, Any]:
    """Where blended sample `index` came from: shard, the shard's sample number, sequences and doc_ids."""
    blended = datasets.train
    shard_id = int(blended.dataset_index[index])
    sequences = [int(i) for i in sample["document_ids"]]
    return {"index": index, "shard": datasets.shard_names[shard_id],
            "shard_sample": int(blended.dataset_sample_index[index]),
            "sequences": sequences, "doc_ids": [datasets.doc_ids[shard_id][i] for i in sequences]}


def micro_batches(cfg: TrainerConfig, datasets: Datasets, step: int, dp_rank: int, dp: int
                  ) -> tuple[list[Batch], list[dict[str, Any]]]:
    """The micro-batches this rank runs at `step`, and the lineage of each sample in them."""
    indices = rank_slice(global_batch_indices(step, cfg.batch.global_batch_size), dp_rank, dp)
    samples = [datasets.train[i] for i in indices]
    lineage = [lineage_record(datasets, i, s) for i, s in zip(indices, samples)]
    mb = cfg.batch.micro_batch_size
    return [collate(samples[i:i + mb]) for i in range(0, len(samples), mb)], lineage


def eval_batches(cfg: TrainerConfig, datasets: Datasets) -> list[Batch]:
    """The fixed validation micro-batches (the same every evaluation, so the curve compares like with like)."""
    if datasets.valid is None:
        return []
    mb = cfg.batch.micro_batch_size
    samples = [datasets.valid[i] for i in range(cfg.schedule.eval_batches * cfg.batch.global_batch_size)]
    return [collate(samples[i:i + mb]) for i in range(0, len(samples), mb)]
