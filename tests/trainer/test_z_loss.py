"""PaLM's z-loss: the objective adds z_loss * log(Z)^2 per token, the reported loss stays the cross entropy,
and training with it keeps the output normaliser near zero."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_config
from trainer.backend import open_backend
from trainer.data import Batch
from trainer.engine import CpuEngine
from trainer.gpu import _loss
from trainer.losses import masked_sums, token_losses

VOCAB = 128


def _batch(cfg, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    b, s = cfg.batch.micro_batch_size, cfg.model.seq_length
    tokens = torch.randint(0, VOCAB, (b, s + 1), generator=g)
    mask = torch.ones(b, s)
    mask[:, :5] = 0                                    # some positions do not count
    return Batch(tokens[:, :-1], tokens[:, 1:].contiguous(), mask, torch.arange(s).expand(b, -1), None)


def test_the_objective_is_cross_entropy_plus_the_squared_log_normaliser():
    cfg = tiny_config()
    with open_backend(cfg):
        torch.manual_seed(0)
        engine = CpuEngine(cfg, None, VOCAB)
        batch = _batch(cfg)
        logits = engine.model(batch.tokens, batch.position_ids, None).float()
        expected_ce = F.cross_entropy(logits.reshape(-1, VOCAB), batch.labels.reshape(-1), reduction="none")
        plain_ce, plain_objective = token_losses(engine.model, batch, 0.0)
        assert plain_objective is plain_ce and torch.allclose(plain_ce, expected_ce.view_as(plain_ce), atol=1e-5)
        ce, objective = token_losses(engine.model, batch, 1e-2)
        assert torch.allclose(ce, plain_ce, atol=1e-5)
        log_z = torch.logsumexp(logits, -1)
        assert torch.allclose(objective - ce, 1e-2 * log_z ** 2, atol=1e-6)
        objective_sum, ce_sum, n = masked_sums(engine.model, batch, 1e-2)
        assert n.item() == batch.loss_mask.sum().item() and not ce_sum.requires_grad
        assert objective_sum.item() > ce_sum.item()


def test_the_gpu_loss_reports_cross_entropy_and_backpropagates_the_objective():
    cfg = tiny_config()
    batch = _batch(cfg)
    ce = torch.rand(batch.tokens.shape, requires_grad=True)
    objective = ce + 0.5
    backprop, n, report = _loss(batch, torch.stack([ce, objective]))
    counted = batch.loss_mask.sum()
    assert n.item() == counted.item()
    assert report["lm loss"][0].item() == pytest.approx((ce * batch.loss_mask).sum().item(), rel=1e-6)
    assert backprop.item() == pytest.approx(report["lm loss"][0].item() + 0.5 * counted.item(), rel=1e-6)


def _mean_log_z(z_loss: float) -> tuple[float, float]:
    cfg = tiny_config(f"optim.z_loss={z_loss}", "optim.lr=0.01", "optim.warmup_steps=1", "schedule.steps=20")
    with open_backend(cfg) as backend:
        torch.manual_seed(0)
        engine = CpuEngine(cfg, backend, VOCAB)
        batch = _batch(cfg, seed=1)
        for _ in range(20):
            result = engine.step([batch])
        logits = engine.model(batch.tokens, batch.position_ids, None).float()
        return torch.logsumexp(logits, -1).abs().mean().item(), result.loss


def test_training_with_z_loss_keeps_the_normaliser_small():
    plain_log_z, plain_loss = _mean_log_z(0.0)
    z_log_z, z_loss = _mean_log_z(0.1)
    assert z_log_z < 0.7 * plain_log_z            # the logits' normaliser is pulled towards 0
    assert math.isfinite(z_loss) and z_loss < math.log(VOCAB)   # and the model still learns the batch


def test_tensor_parallel_ranks_compute_the_terms_from_their_vocabulary_slices(tmp_path):
    """At tp=2 each rank holds half the logits; the reductions give the whole vocabulary's cross entropy and
    log Z on both ranks, and each rank's gradient is its slice of the whole one."""
    from trainer.backend import _free_port
    from zloss_ranks import full_logits, rank_terms

    torch.multiprocessing.spawn(rank_terms, args=(_free_port(), str(tmp_path), VOCAB), nprocs=2)
    logits, labels = full_logits(VOCAB)
    logits.requires_grad_()
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none").view(2, 7)
    log_z = torch.logsumexp(logits, -1)
    (ce + 1e-2 * log_z.square()).sum().backward()
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.allclose(got["ce"], ce.detach(), atol=1e-5)
        assert torch.allclose(got["log_z"], log_z.detach(), atol=1e-5)
        assert torch.allclose(got["grad"], logits.grad[..., rank * VOCAB // 2:(rank + 1) * VOCAB // 2], atol=1e-6)
