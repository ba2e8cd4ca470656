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

import contextlib
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
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer
from megatron.core.datasets.utils import Split

from trainer.config import TrainerConfig
from trainer.mcore_patches import MACHINE_CACHE_PATCHES, applied
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
class StageData:
    """One stage of the manifest's mix: an epoch of its shards, and where it sits in the run's samples."""
    name: str
    train: BlendedDataset | GPTDataset   # one epoch of the stage's training split
    shard_ids: list[int]                 # manifest shard id of each of the stage's datasets, in blend order
    start: int                           # the run sample where the stage begins
    end: int | None                      # where the next stage begins; None: the last stage, repeated to the end


@dataclass
class Datasets:
    stages: list[StageData]        # in training order; one for a plain mix
    valid: BlendedDataset | GPTDataset | None   # the first stage's validation split
    valid_shard_ids: list[int]     # manifest shard id of each of valid's datasets, in blend order
    doc_ids: list[list[str]]       # per manifest shard: doc_id of each sequence
    shard_names: list[str]
    seed: int
    source_names: list[str] = field(default_factory=list)   # the mix sources, sorted
    left_out: dict[str, list[str]] = field(default_factory=dict)   # split -> shards whose part fills no sample
    sources: list[list[int]] = field(default_factory=list)   # per shard: index into source_names of each sequence

    @property
    def train(self) -> BlendedDataset | GPTDataset:
        """The first stage's training epoch (the whole of it for a plain mix)."""
        return self.stages[0].train

    @property
    def staged(self) -> bool:
        return len(self.stages) > 1

    def shard_dataset(self, shard_id: int) -> GPTDataset:
        for stage in self.stages:
            if shard_id in stage.shard_ids:
                local = stage.shard_ids.index(shard_id)
                return stage.train.datasets[local] if isinstance(stage.train, BlendedDataset) else stage.train
        raise IndexError(f"shard {shard_id} is in no stage")

    def locate(self, epoch_sample: int, stage: int = 0, valid: bool = False) -> tuple[int, int]:
        """(manifest shard id, that shard's sample number) of one sample of a stage's training epoch (or of the
        validation split)."""
        split, ids = (self.valid, self.valid_shard_ids) if valid else (self.stages[stage].train,
                                                                      self.stages[stage].shard_ids)
        if isinstance(split, BlendedDataset):
            local, sample = int(split.dataset_index[epoch_sample]), int(split.dataset_sample_index[epoch_sample])
        else:
            local, sample = 0, epoch_sample
        return ids[local], sample

    def stage_of(self, index: int) -> int:
        return next(k for k, stage in enumerate(self.stages) if stage.end is None or index < stage.end)

    def draw(self, index: int) -> tuple[int, int, int]:
        """(stage, epoch, one-epoch sample of that stage) that run sample `index` is."""
        k = self.stage_of(index)
        stage = self.stages[k]
        epoch, position = divmod(index - stage.start, len(stage.train))
        return k, epoch, int(epoch_order(self.seed, epoch, len(stage.train), k)[position])

    def sample(self, index: int) -> dict[str, Any]:
        """Run sample `index`: megatron's tokens, labels, masks and positions."""
        k, _, epoch_sample = self.draw(index)
        return self.stages[k].train[epoch_sample]


@lru_cache(maxsize=4)  # the current epoch's order (and the next one's, at an epoch or stage boundary)
def epoch_order(seed: int, epoch: int, n: int, stage: int = 0) -> np.ndarray:
    """The order in which epoch `epoch` of a stage visits its n samples; RandomState's stream is frozen across
    numpy releases.  Stage 0 keeps the seed of an unstaged run, so a plain mix draws what it always drew."""
    return np.random.RandomState((seed, epoch) if stage == 0 else (seed, epoch, stage)).permutation(n)


def dataset_config(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path,
                   shard_ids: list[int] | None = None) -> GPTDatasetConfig:
    shard_ids = list(range(len(manifest.shards))) if shard_ids is None else shard_ids
    prefixes = [manifest.shards[i].prefix for i in shard_ids]
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


def build_datasets(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path, per_machine: bool = False) -> Datasets:
    """Per stage of the manifest, one GPTDataset per shard, one epoch of its training split blended by megatron's
    builder, and of the first stage's validation split when the run evaluates.  megatron's rank 0 writes the index
    arrays to `cache_dir` and the other ranks read them there; `per_machine` when each machine has a `cache_dir` of
    its own: then each machine's first rank writes them (mcore_patches).

    megatron blends shards by their samples and refuses a shard with none in a split (a bare AssertionError in its
    BlendedDataset): a shard whose part of a split does not fill one sample (a small last shard, a shard of a few
    documents whose valid share rounds to none) is left out of that split's blend, with a warning that says how
    many tokens stay unread.  megatron drops every shard's last partial sample the same way.

    A staged mix (SEAMS §4: a broad mix, then a high-quality annealing one) is trained in order: every stage
    but the last covers one epoch of its samples, the export having sized each stage's tokens; the last
    repeats until the run ends.  A batch at a stage boundary holds the end of one and the start of the next.
    """
    evaluate = cfg.schedule.eval_interval > 0
    stages, valid, valid_ids, start = [], None, [], 0
    left_out: dict[str, list[str]] = {}

    def with_samples(split: Split, shard_ids: list[int]) -> list[int]:
        kept, names = _shards_with_samples(cfg, manifest, cache_dir, shard_ids, split)
        if names:
            left_out.setdefault(split.name, []).extend(names)
        return kept

    for k, stage in enumerate(manifest.stages):
        train_ids = with_samples(Split.train, list(stage.shard_ids))
        train = _build_split(cfg, manifest, cache_dir, train_ids, Split.train, per_machine)
        if train is None or len(train) == 0:
            tokens = sum(manifest.shards[i].tokens for i in stage.shard_ids)
            raise ManifestError(f"stage {stage.name!r} of the shards holds no training sample of "
                                f"{cfg.model.seq_length} tokens ({tokens} tokens in all); export more documents "
                                "or lower model.seq_length")
        last = k == len(manifest.stages) - 1
        stages.append(StageData(stage.name, train, train_ids, start, None if last else start + len(train)))
        start += len(train)
        if k == 0 and evaluate:
            valid_ids = with_samples(Split.valid, list(stage.shard_ids))
            valid = _build_split(cfg, manifest, cache_dir, valid_ids, Split.valid, per_machine)
    per_shard = [read_sources(s) for s in manifest.shards] if evaluate else []
    names = sorted({name for shard in per_shard for name in shard})
    datasets = Datasets(stages=stages, valid=valid, valid_shard_ids=valid_ids,
                        doc_ids=[read_doc_ids(s) for s in manifest.shards],
                        shard_names=[s.name for s in manifest.shards], seed=cfg.seed, source_names=names,
                        sources=[[names.index(n) for n in shard] for shard in per_shard], left_out=left_out)
    if datasets.staged:
        g = cfg.batch.global_batch_size
        for stage in stages:
            log.info("data: stage %s: run samples %d..%s (from step %d), %d shards", stage.name, stage.start,
                     "end" if stage.end is None else stage.end - 1, stage.start // g, len(stage.shard_ids))
        if cfg.schedule.steps * g <= stages[-1].start:
            log.warning("data: the run's %d steps end before its last stage %r begins (step %d); the shards' "
                        "stages are sized for a longer run", cfg.schedule.steps, stages[-1].name, stages[-1].start // g)
    return datasets


def _split_config(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path, shard_ids: list[int],
                  split: Split) -> GPTDatasetConfig:
    """`dataset_config` that builds `split` alone: the same documents of each shard (data.split's bounds), no
    other split.  The split matrix is in megatron's cache key, so these indices never mix with others."""
    config = dataset_config(cfg, manifest, cache_dir, shard_ids)
    config.split_matrix = [bounds if i == split.value else None for i, bounds in enumerate(config.split_matrix)]
    return config


def _shards_with_samples(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path, shard_ids: list[int],
                         split: Split) -> tuple[list[int], list[str]]:
    """The shards of `shard_ids` whose part of `split` fills at least one sample, and the names of the others,
    each with a warning.

    The count is GPTDataset's own for one epoch (its `__len__` with deferred indices): the split's documents
    [round(lo * n), round(hi * n)) as the builder rounds them, (tokens - the extra label token) // sequence
    length, the last partial sample dropped (kept only in a validation split when megatron is told so)."""
    config = _split_config(cfg, manifest, cache_dir, shard_ids, split)
    bounds = config.split_matrix[split.value]
    kept, left_out = [], []
    for shard_id in shard_ids:
        shard = manifest.shards[shard_id]
        indexed = IndexedDataset(shard.prefix)   # held while its lengths (a view of its mmap) are read
        n = len(indexed)
        begin, end = (int(round(b * n)) for b in bounds) if bounds else (0, 0)
        tokens = int(indexed.sequence_lengths[begin:end].sum())
        usable = tokens - config.add_extra_token_to_sequence   # a sample's labels reach one token past it
        partial = split == Split.valid and not config.drop_last_partial_validation_sequence
        if max(0, -(-usable // config.sequence_length) if partial else usable // config.sequence_length):
            kept.append(shard_id)
        else:
            left_out.append(shard.name)
            log.warning("data: shard %s: its %s part (%d of its %d documents, %d tokens) fills no sample of %d "
                        "tokens: left out of the %s split (data.split %r)", shard.name, split.name, end - begin, n,
                        tokens, config.sequence_length, split.name, cfg.data.split)
    if split == Split.valid and not kept:
        log.warning("data: no shard's valid part fills a sample of %d tokens: no validation loss this run; raise the "
                    "valid share of data.split or export more documents", config.sequence_length)
    return kept, left_out


def _build_split(cfg: TrainerConfig, manifest: Manifest, cache_dir: Path, shard_ids: list[int], split: Split,
                 per_machine: bool) -> BlendedDataset | GPTDataset | None:
    """One epoch of `split` over `shard_ids`, blended by megatron's builder; None for no shard."""
    if not shard_ids:
        return None
    with applied(MACHINE_CACHE_PATCHES) if per_machine else contextlib.nullcontext():
        config = _split_config(cfg, manifest, cache_dir, shard_ids, split)
        return BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], lambda: True, config).build()[split.value]


def stage_plan(datasets: Datasets, global_batch_size: int) -> list[dict[str, Any]]:
    """Where each stage starts and ends, in run samples and steps (result.json, MLflow)."""
    return [{"stage": s.name, "first_sample": s.start, "first_step": s.start // global_batch_size,
             "samples_per_epoch": len(s.train), "shards": [datasets.shard_names[i] for i in s.shard_ids]}
            for s in datasets.stages]


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
    stage, epoch, epoch_sample = datasets.draw(index)
    shard_id, shard_sample = datasets.locate(epoch_sample, stage=stage)
    sequences = sample_documents(datasets.shard_dataset(shard_id), shard_sample)
    record = {"index": index, "epoch": epoch, "epoch_sample": epoch_sample, "shard": datasets.shard_names[shard_id],
              "shard_sample": shard_sample, "sequences": sequences,
              "doc_ids": [datasets.doc_ids[shard_id][i] for i in sequences]}
    if datasets.staged:   # only then: an unstaged run's records (and their digests) stay as they were
        record["stage"] = datasets.stages[stage].name
    return record


def micro_batches(cfg: TrainerConfig, datasets: Datasets, step: int, dp_rank: int, dp: int
                  ) -> tuple[list[Batch], list[dict[str, Any]]]:
    """The micro-batches this rank runs at `step`, and the lineage of every sample of the global batch."""
    everything = global_batch_indices(step, cfg.batch.global_batch_size)
    indices = rank_slice(everything, dp_rank, dp)
    samples = [datasets.sample(i) for i in indices]
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
    shard_id, shard_sample = datasets.locate(valid_sample, valid=True)
    local = datasets.valid_shard_ids.index(shard_id)
    split = datasets.valid.datasets[local] if isinstance(datasets.valid, BlendedDataset) else datasets.valid
    sequences = sample_documents(split, shard_sample)
    before = torch.cumsum((tokens == eod).long(), 0) - (tokens == eod).long()
    document = torch.clamp(before, max=len(sequences) - 1)
    per_sequence = torch.tensor([datasets.sources[shard_id][i] for i in sequences])
    return per_sequence[document]
