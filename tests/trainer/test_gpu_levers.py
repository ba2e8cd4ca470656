"""The speed levers of the cuda backend, checked for correctness where a CPU can run them: SDPA core
attention against megatron's own, per-layer torch.compile without graph breaks, the prefetching loader,
and the FLOPs/MFU arithmetic the benchmark reports."""
import pytest
import torch
from torch._dynamo.utils import counters

from conftest import tiny_config
from trainer import mcore_patches as mp
from trainer.attention import SDPAttention
from trainer.backend import open_backend
from trainer.data import build_datasets, micro_batches
from trainer.flops import bf16_peak, flops_per_token, mfu
from trainer.input_cache import open_manifest
from trainer.loader import StepLoader
from trainer.losses import compile_language_model_loss, token_cross_entropy
from trainer.model import build_model, transformer_parameters


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    """Relative error of the whole tensor (METHOD: ‖a − b‖ / ‖a‖), robust to elements near zero."""
    return (a - b).norm().item() <= tol * max(a.norm().item(), 1e-12)


def _loss_and_grads(model, tokens, positions, mask):
    model.zero_grad()
    loss = model(tokens, positions, mask, labels=tokens).sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


LLAMA_STYLE = ("model.activation=swiglu", "model.num_query_groups=2", "model.add_bias_linear=false")


@pytest.mark.parametrize("document_mask,shape", [(False, ()), (True, ()), (False, LLAMA_STYLE), (True, LLAMA_STYLE)],
                         ids=["causal", "document-mask", "gqa-swiglu", "gqa-swiglu-document-mask"])
def test_sdpa_attention_matches_megatrons_unfused_attention(document_mask, shape):
    cfg = tiny_config("model.attention=unfused", *shape)
    with open_backend(cfg):
        unfused = build_model(cfg.model, vocab_size=128)
        sdpa = build_model(tiny_config("model.attention=sdpa", *shape).model, vocab_size=128)
        sdpa.load_state_dict(unfused.state_dict())
        assert all(isinstance(l.self_attention.core_attention, SDPAttention) for l in sdpa.decoder.layers)
        assert not any(isinstance(l.self_attention.core_attention, SDPAttention) for l in unfused.decoder.layers)
        torch.manual_seed(1)
        tokens = torch.randint(0, 128, (2, 32))
        positions = torch.arange(32).expand(2, 32)
        mask = None
        if document_mask:   # two documents per row: the second attends only to itself (megatron: True = masked)
            mask = torch.triu(torch.ones(32, 32, dtype=torch.bool), diagonal=1)
            mask[12:, :12] = True
            mask = mask.expand(2, 1, 32, 32)
        loss_a, grads_a = _loss_and_grads(unfused, tokens, positions, mask)
        loss_b, grads_b = _loss_and_grads(sdpa, tokens, positions, mask)
    assert torch.allclose(loss_a, loss_b, rtol=1e-5)
    for name, grad in grads_a.items():
        assert _close(grad, grads_b[name], 1e-5), name


def test_compiled_layers_form_one_graph_and_match_eager():
    cfg = tiny_config()
    with open_backend(cfg), mp.applied(mp.COMPILE_PATCHES):
        eager = build_model(cfg.model, vocab_size=128)
        compiled = build_model(cfg.model, vocab_size=128)   # megatron modules hold process groups: no deepcopy
        compiled.load_state_dict(eager.state_dict())
        for layer in compiled.decoder.layers:
            layer.compile()
        torch.manual_seed(2)
        tokens = torch.randint(0, 128, (2, 32))
        positions = torch.arange(32).expand(2, 32)
        torch._dynamo.reset()
        counters.clear()
        loss_a, grads_a = _loss_and_grads(eager, tokens, positions, None)
        loss_b, grads_b = _loss_and_grads(compiled, tokens, positions, None)
        breaks, graphs = dict(counters["graph_break"]), counters["stats"]["unique_graphs"]
        torch._dynamo.reset()
    assert not breaks, f"graph breaks inside a transformer layer: {list(breaks)}"
    assert graphs == 1, f"{graphs} graphs for {cfg.model.num_layers} identical layers (recompiling per layer?)"
    assert torch.allclose(loss_a, loss_b, rtol=1e-5)
    for name, grad in grads_a.items():
        assert _close(grad, grads_b[name], 1e-5), name
    # state_dict keys stay megatron's: compile() works in place, no `_orig_mod.` prefix
    assert compiled.state_dict().keys() == eager.state_dict().keys()


def test_compiled_loss_matches_megatrons_cross_entropy_in_one_graph():
    cfg = tiny_config()
    with open_backend(cfg):
        megatrons = build_model(cfg.model, vocab_size=128)
        ours = build_model(cfg.model, vocab_size=128)
        ours.load_state_dict(megatrons.state_dict())
        assert compile_language_model_loss(ours)
        torch.manual_seed(3)
        tokens = torch.randint(0, 128, (2, 32))
        positions = torch.arange(32).expand(2, 32)
        torch._dynamo.reset()
        counters.clear()
        per_token = ours(tokens, positions, None, labels=tokens)
        loss_a, grads_a = _loss_and_grads(megatrons, tokens, positions, None)
        loss_b, grads_b = _loss_and_grads(ours, tokens, positions, None)
        breaks, graphs = dict(counters["graph_break"]), counters["stats"]["unique_graphs"]
        torch._dynamo.reset()
    assert per_token.shape == (2, 32) and per_token.dtype == torch.float32   # megatron's [b, s] loss contract
    assert not breaks and graphs == 1, (breaks, graphs)
    assert torch.allclose(loss_a, loss_b, rtol=1e-5)
    for name, grad in grads_a.items():
        assert _close(grad, grads_b[name], 1e-5), name


def test_compiled_loss_from_bf16_logits_is_the_fp32_cross_entropy():
    torch.manual_seed(4)
    logits = (3 * torch.randn(16, 2, 50)).to(torch.bfloat16).requires_grad_()   # megatron's [s, b, vocab]
    labels = torch.randint(0, 50, (2, 16))
    ce = token_cross_entropy(logits, labels)
    ce.sum().backward()
    reference = logits.detach().double().requires_grad_()
    expected = torch.nn.functional.cross_entropy(reference.transpose(0, 1).reshape(-1, 50), labels.reshape(-1),
                                                 reduction="none").view(2, 16)
    expected.sum().backward()
    assert ce.dtype == torch.float32 and _close(expected.float(), ce, 1e-6)
    assert logits.grad.dtype == torch.bfloat16 and _close(reference.grad.float(), logits.grad.float(), 1e-2)


def test_prefetching_loader_yields_exactly_the_inline_batches(manifest_path, tmp_path):
    manifest = open_manifest(str(manifest_path), str(tmp_path / "cache"), 1)
    ahead, inline = tiny_config("data.prefetch=2"), tiny_config("data.prefetch=0")
    with open_backend(ahead) as backend:
        datasets = build_datasets(ahead, manifest, tmp_path / "idx")
        got = list(StepLoader(ahead, datasets, 3, 7, 0, 1, backend.device))
        want = [(s, *micro_batches(inline, datasets, s, 0, 1)) for s in range(3, 7)]
    assert [g[0] for g in got] == [3, 4, 5, 6]
    for (step, batches, samples), (_, expected, expected_samples) in zip(got, want):
        assert samples == expected_samples
        for b, e in zip(batches, expected):
            assert torch.equal(b.tokens, e.tokens) and torch.equal(b.labels, e.labels)
            assert torch.equal(b.loss_mask, e.loss_mask) and torch.equal(b.position_ids, e.position_ids)


def test_a_failing_data_path_raises_in_the_training_loop(manifest_path, tmp_path):
    manifest = open_manifest(str(manifest_path), str(tmp_path / "cache"), 1)
    cfg = tiny_config("data.prefetch=2")
    with open_backend(cfg) as backend:
        datasets = build_datasets(cfg, manifest, tmp_path / "idx")
        datasets.doc_ids = []   # lineage lookups now fail inside the loader thread
        loader = StepLoader(cfg, datasets, 0, 3, 0, 1, backend.device)
        with pytest.raises(IndexError):
            list(loader)
        loader.close()


def test_flops_and_mfu_follow_the_palm_formula():
    # 1.34 B anchor shapes: 24 layers x 2048, FFN 8192, seq 2048 (notes/trainer-anchors.md)
    n = 24 * (4 * 2048 * 2048 + 2 * 2048 * 8192)
    assert flops_per_token(n, 24, 2048, 2048) == 6 * n + 12 * 24 * 2048 * 2048
    assert mfu(57_806, flops_per_token(n, 24, 2048, 2048), 989e12) == pytest.approx(0.494, abs=0.002)
    assert bf16_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert bf16_peak("NVIDIA H100 PCIe") == 756e12
    assert bf16_peak("NVIDIA H200") == 989e12
    assert bf16_peak("NVIDIA GeForce GTX 1080") is None


def test_transformer_parameters_leave_out_embedding_and_output_layer():
    cfg = tiny_config("model.share_embeddings=false")
    with open_backend(cfg):
        model = build_model(cfg.model, vocab_size=128)
    total = sum(p.numel() for p in model.parameters())
    h = cfg.model.hidden_size
    assert transformer_parameters(model) == total - 2 * 128 * h
