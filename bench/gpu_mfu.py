"""MFU of the trainer's cuda backend (megatron-core) against a plain-PyTorch anchor, on real shards.

    python bench/gpu_mfu.py [--manifest var/shards/manifest.json] [--only NAME,...] [--budget-s 420]
    python bench/gpu_mfu.py --dry-run          # tiny sizes on the CPU: checks this script, not speed

Every variant reads its batches from the same shards through the trainer's own data path
(GPTDataset → StepLoader, prefetching and pinning), in one process, one after another, and prints
tokens/s, MFU (PaLM formula, trainer/flops.py, against the GPU's dense bf16 peak), peak memory and
the time split: forward+backward, optimizer, waiting for data.  Variants:

- `mcore-*`: trainer/gpu.py's CudaEngine (GPTModel, DDP, distributed optimizer, megatron's schedule)
  with the levers of conf/trainer.yaml's `cuda:` section on or off;
- `torch-*`: the anchor, a plain PyTorch GPT of the same shapes (SDPA, per-block torch.compile, bf16
  autocast over fp32 weights, fused AdamW): the speed a hand-written trainer reaches.  It lives here
  and nowhere else: it is a yardstick, not a second model for training.
- `resume`: trains N steps, and again k steps + checkpoint + a fresh engine restored from it + N−k
  steps, with trainer/checkpoint.py; prints the largest loss difference.  The checkpoint is sharded (each
  rank's shards through torch.distributed.checkpoint; on cuda the distributed optimizer's own slices), so
  on a GPU this is the check of the cuda engine's sharded save and restore.

Models: ~1.3 B (24 × 2048, 16 heads, FFN 8192) and ~125 M (12 × 768, 12 heads, FFN 3072), sequence 2048,
untied output layer padded to 32,768 rows (the anchors' shapes in notes/trainer-anchors.md; the
shards' own vocabulary is smaller and every id in them stays valid).  Results go to stdout as a
table and, with --out, as JSON lines.

`--profile N`: after its timed steps, each mcore/torch variant runs N more under torch.profiler (outside
the figures) and prints the kernels' time per step by kind (GEMM, attention, compiled Triton code,
optimizer, copies and casts, communication, the rest), the step's time no kernel ran, and the kernels that
cost most: laid side by side, megatron-core's and the anchor's say where the points between them go.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex|tp_group is None).*")
warnings.filterwarnings("ignore", category=DeprecationWarning)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from trainer.backend import open_backend  # noqa: E402
from trainer.checkpoint import RNGState, read_checkpoint, restore, save_checkpoint  # noqa: E402
from trainer.config import TrainerConfig, load_trainer_config  # noqa: E402
from trainer.data import build_datasets  # noqa: E402
from trainer.engine import build_engine  # noqa: E402
from trainer.flops import bf16_peak, flops_per_token, mfu  # noqa: E402
from trainer.loader import StepLoader  # noqa: E402
from trainer.manifest import load_manifest  # noqa: E402
from trainer.model import padded_vocab_size, transformer_parameters  # noqa: E402

SIZES = {
    "1b": ["model.num_layers=24", "model.hidden_size=2048", "model.num_attention_heads=16",
           "model.ffn_hidden_size=8192", "model.seq_length=2048", "batch.micro_batch_size=4",
           "batch.global_batch_size=32"],
    "125m": ["model.num_layers=12", "model.hidden_size=768", "model.num_attention_heads=12",
             "model.ffn_hidden_size=3072", "model.seq_length=2048", "batch.micro_batch_size=8",
             "batch.global_batch_size=64"],
    "tiny": ["model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4", "model.ffn_hidden_size=256",
             "model.seq_length=64", "batch.micro_batch_size=2", "batch.global_batch_size=4"],
}
COMMON = ["model.share_embeddings=false", "model.vocab_multiple=32768", "model.dropout=0.0",
          "data.reset_attention_mask=false", "data.reset_position_ids=false",   # causal, as the anchors measured
          "optim.warmup_steps=2", "schedule.steps=1000", "schedule.eval_interval=0", "data.split=100,0,0"]
ALL_ON = ["cuda.compile=true", "cuda.fused_optimizer=true", "cuda.cross_entropy_fusion=true", "cuda.compile_loss=true",
          "cuda.scale_loss_by_tokens=true", "cuda.compiled_grad_accumulation=true", "model.attention=sdpa"]

# name -> (engine, size, overrides); in the order they run (most important first: a short lease still
# gets the headline numbers).
VARIANTS = {
    "mcore-1b": ("mcore", "1b", ALL_ON),
    "torch-1b": ("torch", "1b", []),
    "mcore-125m": ("mcore", "125m", ALL_ON),
    "torch-125m": ("torch", "125m", []),
    "resume": ("resume", "125m", ALL_ON + ["cuda.deterministic=true"]),
    "mcore-1b-megatron-accumulation": ("mcore", "1b", ALL_ON + ["cuda.compiled_grad_accumulation=false"]),
    "mcore-1b-megatron-loss": ("mcore", "1b", ALL_ON + ["cuda.compile_loss=false"]),
    "mcore-1b-unfused-loss": ("mcore", "1b", ALL_ON + ["cuda.compile_loss=false", "cuda.cross_entropy_fusion=false"]),
    "mcore-1b-megatron-scaling": ("mcore", "1b", ALL_ON + ["cuda.scale_loss_by_tokens=false"]),
    "mcore-1b-eager": ("mcore", "1b", ALL_ON + ["cuda.compile=false"]),
    "mcore-1b-unfused-optimizer": ("mcore", "1b", ALL_ON + ["cuda.fused_optimizer=false"]),
    "mcore-1b-as-shipped": ("mcore", "1b", ["cuda.compile=false", "cuda.fused_optimizer=false",
                                            "cuda.cross_entropy_fusion=false", "cuda.compile_loss=false",
                                            "cuda.scale_loss_by_tokens=false", "cuda.compiled_grad_accumulation=false",
                                            "model.attention=unfused"]),
    "mcore-1b-accum1": ("mcore", "1b", ALL_ON + ["batch.global_batch_size=4"]),
    "torch-1b-accum1": ("torch", "1b", ["batch.global_batch_size=4"]),
}


@dataclass
class Measured:
    name: str
    params: int
    tokens_per_s: float
    mfu: float | None
    peak_gib: float
    fwd_bwd_s: float
    optimizer_s: float
    data_wait_s: float
    step_s: float
    losses: list[float]
    profile: dict | None = None


# Kernel (or, on the CPU, operator) names by kind, first match wins; lowercased substrings.
KINDS = (
    ("communication", ("nccl", "all_reduce", "allreduce", "reduce_scatter", "all_gather")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "l2norm")),
    ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "sm90_", "sm80_", "ampere_", "aten::mm", "aten::addmm",
              "aten::bmm", "aten::baddbmm", "aten::linear")),
    ("compiled", ("triton",)),
    ("copy/cast", ("copy", "memcpy", "memset", "cast", "fill", "aten::to", "aten::_to")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, marks in KINDS if any(m in low for m in marks)), "other")


def profile_summary(events, on_gpu: bool, steps: int, top: int = 12) -> dict:
    """torch.profiler's key averages -> kernel time per step by kind and the costliest kernels (on a CPU dry run:
    operators' self CPU time, the same table)."""
    from torch.autograd import DeviceType

    rows = []
    for e in events:
        if on_gpu and e.device_type == DeviceType.CUDA:
            us = e.self_device_time_total
        elif not on_gpu and e.device_type == DeviceType.CPU:
            us = e.self_cpu_time_total
        else:
            continue
        if us > 0:
            rows.append((us / 1e3 / steps, e.count / steps, e.key))
    by_kind: dict[str, float] = {}
    for ms, _, name in rows:
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + ms
    rows.sort(reverse=True)
    return {"steps": steps, "busy_ms": sum(ms for ms, _, _ in rows),
            "by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "top": [[name, round(ms, 3), round(calls, 1)] for ms, calls, name in rows[:top]]}


# --- the anchor: a plain PyTorch GPT ---------------------------------------------------------------

def rope_tables(seq: int, head_dim: int, base: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None, None], emb.sin()[None, None]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


class Block(nn.Module):
    """Pre-norm block with megatron's local-spec shapes: fused QKV and FC1 with biases, GELU, RoPE."""

    def __init__(self, h: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


class AnchorGPT(nn.Module):
    def __init__(self, cfg: TrainerConfig, vocab: int):
        super().__init__()
        m = cfg.model
        self.embed = nn.Embedding(vocab, m.hidden_size)
        self.blocks = nn.ModuleList(Block(m.hidden_size, m.num_attention_heads, m.ffn_hidden_size)
                                    for _ in range(m.num_layers))
        self.norm = nn.RMSNorm(m.hidden_size, eps=1e-5)
        self.out = nn.Linear(m.hidden_size, vocab, bias=False)
        self.seq, self.head_dim, self.base = m.seq_length, m.hidden_size // m.num_attention_heads, m.rotary_base
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=m.init_method_std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cos, sin = rope_tables(tokens.shape[1], self.head_dim, self.base, tokens.device)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.out(self.norm(x))


class AnchorEngine:
    """The same step contract as the trainer's engines, for the anchor model."""

    def __init__(self, cfg: TrainerConfig, device: torch.device, vocab: int, compile_blocks: bool):
        self.cfg, self.device = cfg, device
        self.gpt = AnchorGPT(cfg, vocab).to(device)
        if compile_blocks:
            for block in self.gpt.blocks:
                block.compile()
        fused = device.type == "cuda"
        decay = [p for p in self.gpt.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.gpt.parameters() if p.dim() < 2]
        o = cfg.optim
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}],
                                           lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=fused)
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                         else contextlib.nullcontext())

    def step(self, batches):
        from trainer.engine import StepResult
        began = time.perf_counter()
        n_tokens = sum(b.loss_mask.sum() for b in batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss = torch.zeros((), device=self.device)
        for b in batches:
            with self.autocast:
                logits = self.gpt(b.tokens)
            per_token = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), b.labels.reshape(-1),
                                        reduction="none")
            part = (per_token * b.loss_mask.reshape(-1)).sum() / n_tokens
            part.backward()
            loss += part.detach()
        loss = loss.item()
        backward_done = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(self.gpt.parameters(), self.cfg.optim.grad_clip)
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return StepResult(loss, float(norm), {"forward_backward": backward_done - began,
                                              "optimizer": time.perf_counter() - backward_done})


# --- running a variant -----------------------------------------------------------------------------

def variant_config(size: str, overrides: list[str], backend: str) -> TrainerConfig:
    return load_trainer_config([*SIZES[size], *COMMON, f"backend={backend}", *overrides])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(name: str, kind: str, cfg: TrainerConfig, manifest, cache: Path, warmup: int, steps: int,
            peak: float | None, profile_steps: int = 0) -> Measured:
    with open_backend(cfg) as backend:
        device = backend.device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        datasets = build_datasets(cfg, manifest, cache)
        vocab = padded_vocab_size(manifest.vocab_size, cfg.model.vocab_multiple, cfg.parallel.tp)
        engine = (build_engine(cfg, backend, vocab) if kind == "mcore"
                  else AnchorEngine(cfg, device, vocab, compile_blocks=cfg.cuda.compile))
        params = transformer_parameters(engine.gpt) if kind == "mcore" else sum(
            p.numel() for n, p in engine.gpt.named_parameters() if not n.startswith(("embed.", "out.")))
        timed = warmup + steps
        loader = StepLoader(cfg, datasets, 0, timed + profile_steps, backend.dp_rank, backend.dims.dp, device)
        losses, split = [], {"forward_backward": 0.0, "optimizer": 0.0}
        profiler = summary = None
        try:
            began = wait0 = None
            for step, batches, _ in loader:
                if step == warmup:               # compile and allocator warm-up stay out of the numbers
                    _sync(device)
                    began, wait0 = time.perf_counter(), loader.wait_s
                if step == timed:                # the profiled steps come after the figures, outside them
                    _sync(device)
                    elapsed, waited = time.perf_counter() - began, loader.wait_s - wait0
                    activities = [torch.profiler.ProfilerActivity.CPU]
                    if device.type == "cuda":
                        activities.append(torch.profiler.ProfilerActivity.CUDA)
                    profiler = torch.profiler.profile(activities=activities)
                    profiler.__enter__()
                done = engine.step(batches)
                if step < timed:
                    losses.append(done.loss)
                if warmup <= step < timed:
                    for key in split:
                        split[key] += done.seconds[key]
            _sync(device)
            if profiler is None:
                elapsed, waited = time.perf_counter() - began, loader.wait_s - wait0
            else:
                profiler.__exit__(None, None, None)
                summary = profile_summary(profiler.key_averages(), device.type == "cuda", profile_steps)
        finally:
            loader.close()
        tokens = steps * cfg.batch.global_batch_size * cfg.model.seq_length
        rate = tokens / elapsed
        per_token = flops_per_token(params, cfg.model.num_layers, cfg.model.hidden_size, cfg.model.seq_length)
        peak_gib = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
        del engine
    return Measured(name, params, rate, mfu(rate, per_token, peak) if peak else None, peak_gib,
                    split["forward_backward"] / steps, split["optimizer"] / steps, waited / steps, elapsed / steps,
                    losses, summary)


def print_profile(name: str, step_s: float, p: dict, on_gpu: bool) -> None:
    what = "kernels" if on_gpu else "operators' self CPU time (dry run)"
    kinds = ", ".join(f"{kind} {ms:,.1f}" for kind, ms in p["by_kind"].items())
    print(f"{name}: profile of {p['steps']} step(s): {what} {p['busy_ms']:,.1f} ms a step of a {step_s * 1e3:,.1f} ms "
          f"step (none running {max(0.0, step_s * 1e3 - p['busy_ms']):,.1f} ms); by kind, ms a step: {kinds}",
          flush=True)
    for kernel, ms, calls in p["top"]:
        print(f"    {ms:10.3f} ms {calls:8.1f} calls  {kind_of(kernel):13} {kernel[:110]}", flush=True)


def resume_check(cfg: TrainerConfig, manifest, cache: Path, total: int, cut: int
                 ) -> tuple[float, list, list, str]:
    """Losses of `total` uninterrupted steps, and of `cut` steps + checkpoint + fresh restore + the rest, and the
    checkpoint's format."""
    def run(start: int, stop: int, checkpoint: Path | None, save_to: Path | None) -> list[float]:
        with open_backend(cfg) as backend:
            datasets = build_datasets(cfg, manifest, cache)
            vocab = padded_vocab_size(manifest.vocab_size, cfg.model.vocab_multiple, cfg.parallel.tp)
            engine = build_engine(cfg, backend, vocab)
            parts = engine.parts() | {"rng": RNGState()}
            if checkpoint is not None:
                restore(checkpoint, read_checkpoint(checkpoint), parts)
            loader = StepLoader(cfg, datasets, start, stop, backend.dp_rank, backend.dims.dp, backend.device)
            try:
                losses = [engine.step(batches).loss for _, batches, _ in loader]
            finally:
                loader.close()
            if save_to is not None:   # sharded on either backend (save_checkpoint's default format)
                saved.append(save_checkpoint(save_to, stop, parts, {"bench": "resume"}, keep=None, sharded=True))
            del engine
            return losses

    saved: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        straight = run(0, total, None, None)
        first = run(0, cut, None, folder)
        second = run(cut, total, saved[-1], None)
        form = "sharded" if saved[-1].is_dir() else "gathered"
    resumed = first + second
    return max(abs(a - b) for a, b in zip(straight, resumed)), straight, resumed, form


def _free(device_type: str) -> None:
    gc.collect()
    torch._dynamo.reset()
    if device_type == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", default=str(ROOT / "var/shards/manifest.json"))
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (a check of this script)")
    parser.add_argument("--only", help="comma-separated variant names (default: all, in order)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=1e9, help="skip the variants left after this long")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the timed steps, profile N more of each mcore/torch variant: kernel time by kind")
    parser.add_argument("--out", help="append one JSON line per variant here")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available() and not args.dry_run
    backend = "cuda" if cuda else "cpu"
    gpu = torch.cuda.get_device_name() if cuda else "none (CPU dry run)"
    peak = bf16_peak(gpu) if cuda else None
    print(f"device: {gpu}; torch {torch.__version__}; bf16 peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s",
          flush=True)
    manifest = load_manifest(args.manifest)
    print(f"shards: {args.manifest}: {manifest.total_tokens:,} tokens, {len(manifest.shards)} shard(s), "
          f"vocab {manifest.vocab_size}", flush=True)
    names = args.only.split(",") if args.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    started = time.perf_counter()
    rows: list[Measured] = []
    with tempfile.TemporaryDirectory() as cache:
        for name in names:
            kind, size, overrides = VARIANTS[name]
            if args.dry_run:
                size = "tiny"
            if time.perf_counter() - started > args.budget_s:
                print(f"{name}: skipped (budget of {args.budget_s:.0f} s spent)", flush=True)
                continue
            cfg = variant_config(size, overrides, backend)
            t0 = time.perf_counter()
            try:
                if kind == "resume":
                    total, cut = (6, 3) if not args.dry_run else (4, 2)
                    worst, straight, resumed, form = resume_check(cfg, manifest, Path(cache), total, cut)
                    noise = max(abs(a - b) for a, b in zip(straight[:cut], resumed[:cut]))
                    print(f"{name}: {total} steps straight vs {cut} + {form} checkpoint + restore + {total - cut}: "
                          f"largest loss difference {worst:.2e} ({'PASS' if worst <= 1e-4 else 'FAIL'} at 1e-4), "
                          f"{noise:.2e} before the cut (run-to-run); "
                          f"straight {[round(x, 5) for x in straight]} resumed {[round(x, 5) for x in resumed]} "
                          f"[{time.perf_counter() - t0:.0f} s]", flush=True)
                    record = {"name": name, "max_loss_diff": worst, "straight": straight, "resumed": resumed,
                              "checkpoint_format": form}
                else:
                    m = measure(name, kind, cfg, manifest, Path(cache), args.warmup, args.steps, peak, args.profile)
                    rows.append(m)
                    print(f"{name}: {m.params / 1e6:,.0f} M transformer params, {m.tokens_per_s:,.0f} tokens/s, "
                          f"MFU {'-' if m.mfu is None else f'{100 * m.mfu:.1f}%'}, peak {m.peak_gib:.1f} GiB, "
                          f"step {m.step_s * 1e3:.0f} ms = fwd+bwd {m.fwd_bwd_s * 1e3:.0f} + optimizer "
                          f"{m.optimizer_s * 1e3:.0f} + data wait {m.data_wait_s * 1e3:.1f} ms; "
                          f"losses {[round(x, 4) for x in m.losses]} [{time.perf_counter() - t0:.0f} s]", flush=True)
                    if m.profile:
                        print_profile(name, m.step_s, m.profile, cuda)
                    record = {"name": name} | {k: v for k, v in vars(m).items() if k != "name"}
                if not all(math.isfinite(x) for x in record.get("losses", record.get("resumed", []))):
                    print(f"{name}: non-finite loss", flush=True)
            except Exception as exc:   # one broken variant must not cost the lease the others
                traceback.print_exc()
                print(f"{name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
                record = {"name": name, "error": f"{type(exc).__name__}: {exc}"}
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(record | {"device": gpu, "overrides": overrides, "size": size}) + "\n")
            _free(backend)
    print(f"\n{'variant':30} {'tokens/s':>10} {'MFU':>7} {'peak GiB':>9} {'step ms':>8} {'fwd+bwd':>8} "
          f"{'optim':>6} {'data':>6}")
    for m in rows:
        print(f"{m.name:30} {m.tokens_per_s:10,.0f} {'-' if m.mfu is None else f'{100 * m.mfu:6.1f}%':>7} "
              f"{m.peak_gib:9.1f} {m.step_s * 1e3:8.0f} {m.fwd_bwd_s * 1e3:8.0f} {m.optimizer_s * 1e3:6.0f} "
              f"{m.data_wait_s * 1e3:6.1f}")
    print(f"device: {gpu}; total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
