"""The megatron-core patches: each one still needed by the pinned megatron, each one correct, all removable."""
import importlib
import warnings
from types import SimpleNamespace

import pytest
import torch
from megatron.core import parallel_state
from megatron.core.distributed.distributed_data_parallel import DistributedDataParallel
from megatron.core.optimizer import clip_grads
from megatron.core.tensor_parallel import layers

from conftest import tiny_config
from trainer import mcore_patches as mp
from trainer.backend import open_backend
from trainer.model import build_model


@pytest.mark.parametrize("patch", mp.CPU_PATCHES + mp.CPU_PIPELINE_PATCHES + mp.OPTIMIZER_PATCHES + mp.COMPILE_PATCHES
                         + mp.MACHINE_CACHE_PATCHES + mp.ACCUMULATION_PATCHES, ids=lambda p: p.name)
def test_each_patch_is_still_needed_by_the_pinned_megatron(patch):
    # Fails once an upgrade fixes what the patch works around: then delete the patch.
    assert mp.still_needed(patch), f"{patch.name}: {patch.why} no longer holds; remove the patch"


def test_row_parallel_linear_still_warns_on_every_call_without_the_patch():
    with open_backend(tiny_config()):
        model = build_model(tiny_config().model, vocab_size=128)
        tokens = torch.randint(0, 128, (2, 16))
        positions = torch.arange(16).expand(2, 16)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            model(tokens, positions, None)
        assert any("tp_group is None" in str(w.message) for w in seen)
        with mp.applied(mp.COMPILE_PATCHES), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            model(tokens, positions, None)
        assert not any("tp_group is None" in str(w.message) for w in seen)


def test_patched_group_lookup_returns_what_megatron_would():
    from megatron.core.utils import get_tensor_model_parallel_group_if_none as original
    with open_backend(tiny_config()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mp._tp_group_or_default(None) is original(None)
        assert mp._tp_group_or_default(None, is_expert=True) is original(None, is_expert=True)
        group = parallel_state.get_tensor_model_parallel_group()
        assert mp._tp_group_or_default(group) is group


def test_foreach_l2_norm_is_the_norm_of_all_tensors():
    torch.manual_seed(0)
    tensors = [torch.randn(n) for n in (3, 1000, 17)] + [torch.randn(4, 5)]
    norm, per_tensor = mp.foreach_l2_norm(2048 * 32, torch.zeros(1, dtype=torch.int), [tensors], False)
    expected = torch.cat([t.flatten() for t in tensors]).double().norm()
    assert per_tensor is None and norm.shape == (1,)
    assert abs(norm.item() - expected.item()) < 1e-4 * expected.item()
    empty, _ = mp.foreach_l2_norm(0, torch.zeros(1, dtype=torch.int), [[]], False)
    assert empty.item() == 0.0


def test_foreach_scale_copies_scales_in_place_and_across_dtypes():
    src = [torch.randn(5), torch.randn(3, 2)]
    dst = [torch.empty(5, dtype=torch.bfloat16), torch.empty(3, 2, dtype=torch.bfloat16)]
    mp.foreach_scale(0, None, [src, dst], 1.0)
    assert all(torch.equal(d, s.to(torch.bfloat16)) for s, d in zip(src, dst))
    other = [torch.empty(5), torch.empty(3, 2)]
    mp.foreach_scale(0, None, [src, other], 0.5)
    assert all(torch.allclose(o, s * 0.5) for s, o in zip(src, other))
    before = [s.clone() for s in src]
    mp.foreach_scale(0, None, [src, src], 0.25)
    assert all(torch.allclose(s, b * 0.25) for s, b in zip(src, before))


def test_compiled_accumulation_adds_bf16_gradients_into_fp32_main_grads_through_megatrons_hook(monkeypatch):
    from torch._dynamo.utils import counters
    monkeypatch.setattr(mp, "COMPILED_ACCUMULATION_MIN", 64)   # the weight takes the compiled add, the bias torch's
    weight = torch.nn.Parameter(torch.zeros(16, 8, dtype=torch.bfloat16))
    bias = torch.nn.Parameter(torch.zeros(8, dtype=torch.bfloat16))
    ready = []   # megatron's hook, overlapping the reduce, tells each parameter's bucket that its gradient is in
    bucket = SimpleNamespace(register_grad_ready=lambda param, force: ready.append(param))
    ddp = SimpleNamespace(ddp_config=SimpleNamespace(overlap_grad_reduce=True), force_all_reduce=False,
                          param_to_bucket_group={weight: bucket, bias: bucket})
    expected = {}
    for param in (weight, bias):
        param.main_grad, param.grad_added_to_main_grad = torch.zeros(param.shape), False
        expected[param] = torch.zeros(param.shape, dtype=torch.float64)
    with mp.applied(mp.ACCUMULATION_PATCHES):
        hooks = {param: DistributedDataParallel._make_backward_post_hook(ddp, param) for param in (weight, bias)}
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(5)
    for micro_batch in range(3):
        for param, hook in hooks.items():
            grad = torch.randn(param.shape).to(torch.bfloat16)
            param.grad = grad.clone()
            expected[param] += grad.double()
            hook()
            assert param.grad is None and param.grad_added_to_main_grad is False
    graphs = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    for param in (weight, bias):
        assert param.main_grad.dtype == torch.float32
        assert torch.allclose(param.main_grad.double(), expected[param], rtol=1e-6, atol=1e-6)
    assert ready == [weight, bias] * 3
    assert graphs == 1   # the weight's add, compiled once for its three micro-batches


def test_applied_restores_every_original_even_after_an_error():
    originals = (clip_grads.l2_norm_impl, clip_grads.multi_tensor_scale_impl,
                 layers.get_tensor_model_parallel_group_if_none)
    with pytest.raises(RuntimeError):
        with mp.applied(mp.OPTIMIZER_PATCHES + mp.COMPILE_PATCHES):
            assert clip_grads.l2_norm_impl is mp.foreach_l2_norm
            assert layers.get_tensor_model_parallel_group_if_none is mp._tp_group_or_default
            raise RuntimeError("boom")
    assert (clip_grads.l2_norm_impl, clip_grads.multi_tensor_scale_impl,
            layers.get_tensor_model_parallel_group_if_none) == originals


@pytest.mark.parametrize("patch", [mp.CPU_P2P_BUFFERS, mp.CPU_SCHEDULE_TOKENS], ids=lambda p: p.name)
def test_pipeline_modules_see_the_cpu_as_their_cuda_device_inside_the_patch_only(patch):
    module = importlib.import_module(patch.module)
    with mp.applied((patch,)):
        seen = module.torch
        assert seen.cuda.current_device() == torch.device("cpu") and seen.cuda.synchronize() is None
        assert seen.zeros([], dtype=torch.int, device="cuda").device.type == "cpu"   # schedules' token counter
        received = seen.empty((3,), device=seen.cuda.current_device(), dtype=torch.int64)   # p2p's buffers
        assert received.device.type == "cpu"
        assert seen.Tensor is torch.Tensor and seen.distributed is torch.distributed   # the rest is torch
    assert module.torch is torch


@pytest.mark.parametrize("patch", mp.MACHINE_CACHE_PATCHES, ids=lambda p: p.name)
def test_dataset_modules_see_the_rank_within_the_machine_inside_the_patch_only(patch, monkeypatch):
    """Rank 5, the second of its machine: megatron's dataset code takes it for a rank 1 (not a builder of the index
    cache) inside the patch; everything else is torch.  The two-machine run: tests/trainer/test_object_storage.py."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    module = importlib.import_module(patch.module)
    with mp.applied((patch,)):
        seen = module.torch
        assert seen.distributed.get_rank() == 1
        assert seen.distributed.is_initialized is torch.distributed.is_initialized
        assert seen.distributed.barrier is torch.distributed.barrier and seen.Tensor is torch.Tensor
    assert module.torch is torch


def test_tied_embedding_setup_keeps_its_tensors_on_the_cpu_inside_the_patch_only():
    from megatron.core.models.common.language_module.language_module import LanguageModule
    weight = torch.ones(3)
    with mp._CudaCopiesStayOnCpu():
        assert weight.cuda() is weight
        assert torch.equal(weight + 1, torch.full((3,), 2.0))   # other calls pass through
    with mp.applied((mp.CPU_TIED_EMBEDDING,)):
        assert LanguageModule.setup_embeddings_and_output_layer is mp.cpu_setup_embeddings_and_output_layer
    assert LanguageModule.setup_embeddings_and_output_layer is mp._SETUP_EMBEDDINGS
    if not torch.cuda.is_available():   # what the patch prevents: the shipped setup's .cuda() on a CPU machine
        with pytest.raises((RuntimeError, AssertionError)):
            weight.cuda()
