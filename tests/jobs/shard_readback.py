"""Read a shard back the way the trainer does: megatron-core's IndexedDataset, then its GPTDataset."""
from __future__ import annotations

import warnings

import numpy as np

warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")


def indexed_documents(prefix: str) -> list[list[int]]:
    """Every sequence of the shard, as megatron-core's IndexedDataset reads it."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(prefix)
    return [dataset[i].tolist() for i in range(len(dataset))]


class _Tokenizer:
    def __new__(cls, vocab_size: int, eod: int):
        from megatron.core.datasets.megatron_tokenizer import MegatronLegacyTokenizer

        class Pretokenized(MegatronLegacyTokenizer):
            def __init__(self):
                super().__init__("pretokenized", vocab_size=vocab_size, eod=eod)

            def tokenize(self, text):
                raise NotImplementedError

            vocab = inv_vocab = property(lambda self: {})
            vocab_size = property(lambda self: vocab_size)
            eod = property(lambda self: eod)

        return Pretokenized()


def gpt_samples_match(prefix: str, vocab_size: int, eod: int, seq_length: int, cache_dir: str) -> int:
    """Build megatron-core's GPTDataset over the whole shard and check every sample against the shard's
    documents concatenated in the dataset's own document order; returns the number of samples checked."""
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    indexed = IndexedDataset(prefix)
    config = GPTDatasetConfig(random_seed=1, sequence_length=seq_length, blend=([prefix], None), split="100,0,0",
                              path_to_cache=cache_dir, tokenizer=_Tokenizer(vocab_size, eod),
                              reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                              create_attention_mask=False)
    dataset = GPTDataset(indexed, prefix, np.arange(len(indexed), dtype=np.int32), None, Split.train, config)
    stream = np.concatenate([indexed[int(d)] for d in dataset.document_index]).astype(np.int64)
    for i in range(len(dataset)):
        sample = dataset[i]
        tokens = np.append(sample["tokens"].numpy(), sample["labels"].numpy()[-1])
        j = int(dataset.shuffle_index[i])
        expected = stream[j * seq_length: j * seq_length + seq_length + 1]
        assert tokens.tolist() == expected.tolist(), f"sample {i} of {prefix} differs from the shard's documents"
    return len(dataset)
