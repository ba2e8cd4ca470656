"""Shards → megatron GPTDatasets → the global batch of each step, and which documents fed it.

Batch order (OLMo-core): megatron builds one epoch of the training split, every shard's samples
blended in proportion to its size, in an order it derives from `seed`.  The global batch of step s
is the run's samples [s·G, (s+1)·G); sample i is epoch i // N, and epoch e visits the N samples of
that one-epoch dataset in the permutation `epoch_order(seed, e, N)`.  So a batch is a pure function
of (seed, step) and the data: not of the run's length (a 100-step run's batches are the first 100
of a 1000-step run's), nor of dp: a data-parallel rank takes `batch[dp_rank::dp]`.  A resumed run
draws exactly the batches the killed one would have.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer

from trainer.config import TrainerConfig
from trainer.manifest import Manifest, ManifestError, read_doc_ids, read_sources

log = logging.getLogger(__name__)


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


def sample_documents(dataset: GPTDataset, sample: int) -> list[int]:
    """The sequence indices (documents of the shard) that one sample of `dataset` takes tokens from.

    Read from the dataset's own index arrays, the ones megatron builds and caches for this purpose:
    shuffle_index maps the sample to its row of sample_index, whose [begin, end] pair of
    (document_index position, offset) bounds the sample; document_index names the documents between.
    """
    if dataset.shuffle_index is None:   # megatron maps its index arrays lazily (defer_npy_index_mmap)
        dataset[0]
    row = int(dataset.shuffle_index[sample])
    begin, end = int(dataset.sample_index[row][0]), int(dataset.sample_index[row + 1][0])
    return [int(i) for i in dataset.document_index[begin:end + 1]]


@dataclass
class Batch:
    tokens: torch.Tensor           # [b, s]
    labels: torch.Tensor           # [b, s]
    loss_mask: torch.Tensor        # [b, s] float
    position_ids: torch.Tensor     # [b, s]
    attention_mask: torch.Tensor | None   # [b, 1, s, s] bool, True = masked; None = plain causal
    source_ids: torch.Tensor | None = None   # [b, s] index into Datasets.source_names of each label's document


@dataclass
class Datasets:
    train: BlendedDataset | GPTDataset   # one epoch of the training split (a GPTDataset when there is one shard)
    valid: BlendedDataset | GPTDataset | None
    doc_ids: list[list[str]]       # per shard (= blended dataset id): doc_id of each sequence
    shard_names: list[str]
    seed: int
    source_names: list[str] = field(default_factory=list)   # the mix sources, sorted
    sources: list[list[int]] = field(default_factory=list)   # per shard: index into source_names of each sequence

    def shard_dataset(self, shard_id: int) -> GPTDataset:
        return self.train.datasets[shard_id] if isinstance(self.train, BlendedDataset) else self.train

    def locate(self, epoch_sample: int, split: BlendedDataset | GPTDataset | None = None) -> tuple[int, int]:
        """(shard id, that shard's sample number) of one sample of the one-epoch training dataset (or `split`)."""
        split = self.train if split is None else split
        if isinstance(split, BlendedDataset):
            return int(split.dataset_index[epoch_sample]), int(split.dataset_sample_index[epoch_sample])
        return 0, epoch_sample

    def draw(self, index: int) -> tuple[int, int]:
        """(epoch, one-epoch sample) that run sample `index` is."""
        epoch, position = divmod(index, len(self.train))
        return epoch, int(epoch_order(self.seed, epoch, len(self.train))[position])


@lru_cache(maxsize=2)  # the current epoch's order (and the next one's, at an epoch boundary)
def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order in which epoch `epoch` visits the n samples; RandomState's stream is frozen across numpy releases."""
    return np.random.RandomState((seed, epoch)).permutation(n)


def dataset_config(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path) -> GPTDatasetConfig:
    prefixes = [s.prefix for s in manifest.shards]
    return GPTDatasetConfig(
        random_seed=cfg.seed,
        sequence_length=cfg.model.seq_length,
        # No weights and no sizes: megatron blends one exhaustive epoch, each shard by its number of samples.
        blend=(prefixes, None),
        split=cfg.data.split,
        path_to_cache=str(cache_dir),
        tokenizer=ManifestTokenizer(manifest),
        reset_position_ids=cfg.data.reset_position_ids,
        reset_attention_mask=cfg.data.reset_attention_mask,
        eod_mask_loss=cfg.data.eod_mask_loss,
        create_attention_mask=cfg.data.reset_attention_mask,  # only document masks need an explicit s×s mask
    )


def build_datasets(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path) -> Datasets:
    """One GPTDataset per shard, one epoch of each split blended by megatron's builder."""
    evaluate = cfg.schedule.eval_interval > 0
    _check_valid_split(cfg, manifest, evaluate)
    gpt_config = dataset_config(cfg, manifest, cache_dir)
    train, valid, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [None, None, None], lambda: True, gpt_config).build()
    if train is None or len(train) == 0:
        raise ManifestError(f"the shards hold no training sample of {cfg.model.seq_length} tokens "
                            f"({manifest.total_tokens} tokens in all); export more documents or lower model.seq_length")
    per_shard = [read_sources(s) for s in manifest.shards] if evaluate else []
    names = sorted({name for shard in per_shard for name in shard})
    return Datasets(train=train, valid=valid if evaluate else None,
                    doc_ids=[read_doc_ids(s) for s in manifest.shards],
                    shard_names=[s.name for s in manifest.shards], seed=cfg.seed, source_names=names,
                    sources=[[names.index(n) for n in shard] for shard in per_shard])


def _check_valid_split(cfg: TrainerConfig, manifest: Manifest, evaluate: bool) -> None:
    if not evaluate:
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
    """Run sample indices of step `step`'s global batch (0-based step); `Datasets.draw` maps them to samples."""
    return list(range(step * global_batch_size, (step + 1) * global_batch_size))


def rank_slice(indices: list[int], dp_rank: int, dp: int) -> list[int]:
    """This data-parallel rank's share of a global batch: strided, so the global batch is dp-independent."""
    return indices[dp_rank::dp]


def collate(samples: list[dict[str, Any]]) -> Batch:
    stack = lambda key: torch.stack([s[key] for s in samples])
    mask = stack("attention_mask") if "attention_mask" in samples[0] else None
    return Batch(tokens=stack("tokens"), labels=stack("labels"), loss_mask=stack("loss_mask").float(),
                 position_ids=stack("position_ids"), attention_mask=mask)


def lineage_record(datasets: Datasets, index: int) -> dict[str, Any]:
    """Where run sample `index` came from: epoch, shard, the shard's sample number, sequences and doc_ids."""
    epoch, epoch_sample = datasets.draw(index)
    shard_id, shard_sample = datasets.locate(epoch_sample)
    sequences = sample_documents(datasets.shard_dataset(shard_id), shard_sample)
    return {"index": index, "epoch": epoch, "epoch_sample": epoch_sample, "shard": datasets.shard_names[shard_id],
            "shard_sample": shard_sample, "sequences": sequences,
            "doc_ids": [datasets.doc_ids[shard_id][i] for i in sequences]}


def micro_batches(cfg: TrainerConfig, datasets: Datasets, step: int, dp_rank: int, dp: int
                  ) -> tuple[list[Batch], list[dict[str, Any]]]:
    """The micro-batches this rank runs at `step`, and the lineage of every sample of the global batch."""
    everything = global_batch_indices(step, cfg.batch.global_batch_size)
    indices = rank_slice(everything, dp_rank, dp)
    samples = [datasets.train[datasets.draw(i)[1]] for i in indices]
    lineage = [lineage_record(datasets, i) for i in everything]   # the whole global batch, whichever rank
    mb = cfg.batch.micro_batch_size
    return [collate(samples[i:i + mb]) for i in range(0, len(samples), mb)], lineage


def eval_batches(cfg: TrainerConfig, datasets: Datasets, eod: int) -> list[Batch]:
    """The fixed validation micro-batches (the same every evaluation, so the curve compares like with like).

    A validation split smaller than eval_batches global batches is read round and round.
    """
    if datasets.valid is None:
        return []
    if len(datasets.valid) == 0:
        log.warning("the validation split holds no sample of %d tokens: no validation loss this run; raise the "
                    "valid share of data.split or export more documents", cfg.model.seq_length)
        return []
    mb = cfg.batch.micro_batch_size
    n = len(datasets.valid)
    picks = [i % n for i in range(cfg.schedule.eval_batches * cfg.batch.global_batch_size)]
    samples = [datasets.valid[i] for i in picks]
    batches = [collate(samples[i:i + mb]) for i in range(0, len(samples), mb)]
    for start, batch in zip(range(0, len(samples), mb), batches):
        batch.source_ids = torch.stack([_label_sources(datasets, picks[start + k], s["tokens"], eod)
                                        for k, s in enumerate(samples[start:start + mb])])
    return batches


def _label_sources(datasets: Datasets, valid_sample: int, tokens: torch.Tensor, eod: int) -> torch.Tensor:
    """Which source each label of a validation sample belongs to: the documents of the sample follow one
    another, each ended by EOD, so a position's document is the number of EODs before it."""
    shard_id, shard_sample = datasets.locate(valid_sample, datasets.valid)
    split = datasets.valid.datasets[shard_id] if isinstance(datasets.valid, BlendedDataset) else datasets.valid
    sequences = sample_documents(split, shard_sample)
    before = torch.cumsum((tokens == eod).long(), 0) - (tokens == eod).long()
    document = torch.clamp(before, max=len(sequences) - 1)
    per_sequence = torch.tensor([datasets.sources[shard_id][i] for i in sequences])
    return per_sequence[document]
