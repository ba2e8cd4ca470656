"""megatron-core's GPTModel trains on a CPU inside the cpu backend (trainer/mcore_patches.py, trainer/cpu.py)."""
import pytest
import torch
from megatron.core import utils as mcore_utils
from megatron.core.tensor_parallel import random as mcore_random

from conf import ConfigError
from conftest import tiny_config
from trainer import cpu, mcore_patches
from trainer.backend import open_backend
from trainer.model import build_model, padded_vocab_size


@pytest.mark.parametrize("positions,norm", [("rope", "RMSNorm"), ("learned_absolute", "LayerNorm")])
def test_gpt_model_forward_and_backward_on_cpu(positions, norm):
    cfg = tiny_config(f"model.position_embedding={positions}", f"model.normalization={norm}")
    with open_backend(cfg):
        model = build_model(cfg.model, vocab_size=128)
        tokens = torch.randint(0, 128, (2, cfg.model.seq_length))
        positions_ids = torch.arange(cfg.model.seq_length).expand(2, -1)
        per_token = model(tokens, positions_ids, None, labels=torch.roll(tokens, -1, dims=1))
        assert per_token.shape == (2, cfg.model.seq_length)
        assert abs(per_token.mean().item() - torch.log(torch.tensor(128.0)).item()) < 0.5   # untrained ≈ uniform
        per_token.mean().backward()
        grads = [p.grad for p in model.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert sum(g.abs().sum().item() for g in grads) > 0


def test_cpu_patches_live_only_inside_the_backend():
    original = mcore_utils.GlobalMemoryBuffer.get_tensor
    with open_backend(tiny_config()):
        assert mcore_utils.GlobalMemoryBuffer.get_tensor is mcore_patches.cpu_get_tensor
        buffer = mcore_utils.GlobalMemoryBuffer()
        assert buffer.get_tensor((3, 4), torch.float32, "scratch").device.type == "cpu"
        assert isinstance(mcore_random.get_cuda_rng_tracker(), cpu.CpuRNGStatesTracker)
    assert mcore_utils.GlobalMemoryBuffer.get_tensor is original
    assert not isinstance(mcore_random._CUDA_RNG_STATE_TRACKER, cpu.CpuRNGStatesTracker)


def test_cpu_rng_tracker_forks_a_separate_stream():
    tracker = cpu.seed_cpu_rng_tracker(7)
    torch.manual_seed(0)
    outside_before = torch.get_rng_state()
    with tracker.fork():
        first = torch.rand(3)
    assert torch.equal(torch.get_rng_state(), outside_before)   # the default stream is untouched
    with tracker.fork():
        second = torch.rand(3)
    assert not torch.equal(first, second)                      # the tracked stream advanced


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cuda_backend_without_a_gpu_is_refused_with_a_clear_message():
    with pytest.raises(ConfigError, match="backend 'cuda' needs an NVIDIA GPU"):
        with open_backend(tiny_config("backend=cuda")):
            pass


def test_vocab_is_padded_to_the_multiple():
    assert padded_vocab_size(4096, 64) == 4096
    assert padded_vocab_size(4097, 64) == 4160
    assert padded_vocab_size(250, 64, tp=2) == 256
