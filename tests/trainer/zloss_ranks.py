"""One of two tensor-parallel ranks for test_z_loss.py, spawned as a process of its own: a module apart from the
tests so that the child imports no `conftest` (another folder's would shadow tests/trainer's there)."""
import os

import torch

from trainer.backend import open_backend
from trainer.config import load_trainer_config
from trainer.losses import vocab_parallel_terms


def full_logits(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole vocabulary's logits and the labels, the same in every process."""
    logits = torch.randn(2, 7, vocab, generator=torch.Generator().manual_seed(3)) * 4
    return logits, torch.randint(0, vocab, (2, 7), generator=torch.Generator().manual_seed(4))


def rank_terms(rank: int, port: int, out: str, vocab: int) -> None:
    """This rank's half of the vocabulary's logits: its (ce, log Z) and their gradient, saved to `out`."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with open_backend(load_trainer_config(["parallel.tp=2"])):
        logits, labels = full_logits(vocab)
        half = logits[..., rank * vocab // 2:(rank + 1) * vocab // 2].clone().requires_grad_()
        ce, log_z = vocab_parallel_terms(half, labels)
        (ce + 1e-2 * log_z.square()).sum().backward()
        torch.save({"ce": ce.detach(), "log_z": log_z.detach(), "grad": half.grad}, f"{out}/rank{rank}.pt")
