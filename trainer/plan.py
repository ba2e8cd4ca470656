"""`python -m trainer.plan [--json] [--model 70b] [--gpus N] [-o KEY=VALUE ...]`: what a training run needs.

Given a model shape (a preset, or conf/trainer.yaml's model section), a cluster and a token budget, it proposes
a TP/PP/CP/DP layout and estimates memory per GPU, step time, days, GPU-hours, cost, failures, the checkpoint
interval and the compute-optimal model size.  Defaults and the reasons for them: conf/trainer_plan.yaml, read by
trainer/plan_config.py; trainer/plan_report.py prints the readable report.
Notation: s sequence, b micro-batch, h hidden, a heads, g query groups, f FFN size, L layers, V padded vocab,
t/p/c/d the TP/PP/CP/DP degrees, v virtual stages, m micro-batches per step on one DP rank, n GPUs.

    params        L (2h²(1 + g/a) + 2hf·(1.5 if SwiGLU) + 2h·norm) + h·norm + V h (x2 untied)   Megatron's count
    stage params  (ceil(L/p) layers + V h) / t, + V h / t if untied and p = 1   the first stage (uneven splits ok)
    bytes/param   bf16: weights 2 + fp32 grads 4 + fp32 master and Adam 12 (/ (d c) with the distributed
                  optimizer): 18 or 6 + 12/dc; fp32: 16 or 8 + 8/dc  (megatron theoretical_memory_usage.py)
    activations   per layer, Korthikanti et al. 2022 Table 2 with Megatron's 34 -> 18 + 4f/h, s -> s/c:
                    selective (or flash attention)  s b h (18 + 4f/h) / t         (no SP: sbh(10 + (8 + 4f/h)/t))
                    none, unfused attention         + s b h · 5 a s / (h t)
                    full                            2 s b h / t, plus one layer's selective set while it recomputes
                  first stage = (p ceil(L/p) x per layer + 8sbp + sbhp) x min(1, m/p)   [x (1 + (p-1)/(pv)) interleaved]
                                + 4 s b h (1 + V/h) if p = 1 (output layer and loss), the whole / t
    layout        TP up to the node (a divisor of a, g and gpus_per_node), then PP (at most L), then CP:
                  the first layout whose total fits usable_fraction x the GPU's memory; d = n / (t p c)
    step          tokens per step x FLOPs per token / (n x bf16 peak x MFU); FLOPs per token 6N (6n) or
                  6 N_non-embedding + 12 L h s (palm, trainer/flops.py); bubble (p-1)/(v m) of the compute
    communication (if not overlapped) TP: 4 all-reduces (6 with full recompute) of s b h bf16 per layer per
                  micro-batch, ring 2(t-1)/t over NVLink; DP: ring 2(dc-1)/dc x fp32 stage grads over the network;
                  PP: s b h / t bf16 each way per micro-batch
    failures      lambda n per hour (Llama 3: 419 / (54 d x 24 h x 16,384 GPUs)); MTBF = 1 / (lambda n)
    checkpoint    14 B/param; blocking write delta = size / write bandwidth; Young/Daly tau = sqrt(2 delta MTBF);
                  wall = compute x (1 + delta/tau) / (1 - lambda n (tau/2 + restart))
    compute-opt   C = 6 N D of the run (or scaling.compute_flops); rule: D = 20 N, N = sqrt(C / 120);
                  fit: L(N, D) = E + A/N^alpha + B/D^beta minimised on 6ND = C (Chinchilla approach 3);
                  inference-aware: the N minimising 6 N D_train + 2 N D_inference with L(N, D_train) = the
                  Chinchilla-optimal loss (Sardana et al. 2024)

The worked example (the defaults): a Llama-3-style 70B on 2,048 H100 for 15 T tokens at 50% MFU plans TP 8,
PP 4, DP 64 and 72.6 days; a ~1 TB checkpoint.  Three things decide those figures: the days count 6N FLOPs per
token as the example does (PaLM's attention term adds 12% at s = 8,192: 81.5 days); PP 4 is what a replicated
optimizer needs (with the distributed optimizer TP 8 x PP 1 already fits, at 70 of 72 GiB); and Llama 3's failure
rate gives one failure every ~25 h at 2,000 GPUs, every ~3 h at 16,384.  `estimate_memory()` is the pure
function the trainer can call to refuse a sequence length or micro-batch that cannot fit its device.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, replace
from typing import Any

from conf import ConfigError
from trainer.flops import flops_per_token
from trainer.plan_config import (BYTES_PER_PARAM, DAY_S, GIB, RECOMPUTE, Layout, MemoryConfig, ModelShape,
                                 PlanConfig, PlanError, ScalingConfig, load_plan)
from trainer.plan_report import render


# --- memory -------------------------------------------------------------------------------------------------------

def padded_vocab(model: ModelShape, tp: int, multiple: int) -> int:
    step = multiple * tp
    return -(-model.vocab_size // step) * step


def stage_params(model: ModelShape, layout: Layout, vocab_multiple: int) -> float:
    """Parameters on the most loaded GPU: the first pipeline stage's share of one TP group."""
    embedding = padded_vocab(model, layout.tp, vocab_multiple) * model.hidden_size
    params = model.non_embedding_params * stage_layers(model, layout) / model.num_layers + embedding
    if not model.share_embeddings and layout.pp == 1:
        params += embedding  # the output layer sits on the same (only) stage
    return params / layout.tp


def stage_layers(model: ModelShape, layout: Layout) -> int:
    """Layers on the first stage: an uneven split (Megatron's --decoder-first-pipeline-num-layers) gives it most."""
    return -(-model.num_layers // layout.pp)


def estimate_memory(model: ModelShape, layout: Layout, micro_batch_size: int, num_microbatches: int | None,
                    memory: MemoryConfig) -> dict[str, float]:
    """Bytes per GPU on the most loaded (first) pipeline stage, by component, and their total.

    Pure: the trainer can call it with the run's shape, layout and batch to refuse a sequence length or
    micro-batch that cannot fit its device (compare "total" with the device's memory).  `num_microbatches`
    None means at least `pp` (the pipeline is full).
    """
    if micro_batch_size < 1:
        raise PlanError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    t, p, c, v = layout.tp, layout.pp, layout.cp, layout.virtual_stages
    weight_b, grad_b, optim_b = BYTES_PER_PARAM[memory.precision]
    on_gpu = stage_params(model, layout, memory.vocab_multiple)
    shards = layout.dp * c if memory.distributed_optimizer else 1

    s, b, h = model.seq_length / c, micro_batch_size, model.hidden_size
    sbh = s * b * h
    kept = 18 + 4 * model.ffn_hidden_size / h  # Korthikanti's 34 when f = 4h
    scores = 0 if memory.flash_attention else 5 * model.num_attention_heads * s / h
    sharded = memory.sequence_parallel or t == 1
    selective = sbh * kept / t if sharded else sbh * (10 + (kept - 10) / t)
    if memory.recompute == "full":
        per_layer = 2 * sbh / t if sharded else 2 * sbh
    elif memory.recompute == "none":
        per_layer = selective + sbh * scores / t
    else:
        per_layer = selective

    # p micro-batches of the first stage's layers in flight (1F1B), and the embedding's input and dropout mask
    stages_in_flight = p * stage_layers(model, layout) * per_layer + (8 * s * b * p + sbh * p) / t
    if v > 1:
        stages_in_flight *= 1 + (p - 1) / (p * v)
    elif p > 1 and num_microbatches is not None:
        stages_in_flight *= min(1, num_microbatches / p)
    activations = stages_in_flight
    if memory.recompute == "full":
        activations += selective + sbh * scores / t  # one layer's full set while its backward recomputes it
    if p == 1:
        activations += 4 * sbh * (1 + padded_vocab(model, t, memory.vocab_multiple) / h) / t

    parts = {"weights": on_gpu * weight_b, "gradients": on_gpu * grad_b, "optimizer": on_gpu * optim_b / shards,
             "activations": activations}
    return {**parts, "total": sum(parts.values())}


# --- the plan -----------------------------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted({*small, *(n // k for k in small)})


def candidate_layouts(model: ModelShape, cfg: PlanConfig) -> list[Layout]:
    """Every layout that divides, in the order the planner tries them: TP up to the node, then PP, then CP."""
    n, fixed = cfg.cluster.num_gpus, cfg.layout
    tps = _divisors(math.gcd(cfg.cluster.gpus_per_node, model.num_attention_heads, model.num_query_groups))
    # uneven splits are allowed (the first stage takes the most layers), but every stage needs a layer
    pps = [p for p in _divisors(n) if p <= model.num_layers]
    cps = _divisors(math.gcd(n, model.seq_length // 2)) if model.seq_length > 1 else [1]  # 2 x CP chunks balance it
    problems = []
    if fixed.tp and fixed.tp not in tps:
        problems.append(f"TP {fixed.tp} must divide the heads ({model.num_attention_heads}), the query groups "
                        f"({model.num_query_groups}) and gpus_per_node ({cfg.cluster.gpus_per_node})")
    if fixed.pp and fixed.pp > model.num_layers:
        problems.append(f"PP {fixed.pp} must be at most num_layers ({model.num_layers})")
    if fixed.cp and fixed.cp not in cps:
        problems.append(f"CP {fixed.cp} must divide num_gpus ({n}) and 2 x CP the sequence ({model.seq_length})")
    if fixed.virtual_stages > 1 and fixed.pp and model.num_layers % (fixed.pp * fixed.virtual_stages):
        problems.append(f"PP {fixed.pp} x virtual_stages {fixed.virtual_stages} must divide num_layers "
                        f"({model.num_layers}): interleaving needs equal chunks")
    if problems:
        raise PlanError("layout does not divide: " + "; ".join(problems))
    layouts = []
    for c in [fixed.cp] if fixed.cp else cps:
        for p in [fixed.pp] if fixed.pp else pps:
            for t in [fixed.tp] if fixed.tp else tps:
                if n % (t * p * c) or (fixed.dp and n // (t * p * c) != fixed.dp):
                    continue
                if fixed.virtual_stages > 1 and (p == 1 or model.num_layers % (p * fixed.virtual_stages)):
                    continue
                layouts.append(Layout(t, p, c, n // (t * p * c), fixed.virtual_stages))
    if not layouts:
        given = ", ".join(f"{k.upper()} {v}" for k, v in asdict(fixed).items() if v and k != "virtual_stages")
        raise PlanError(f"no TP x PP x CP x DP layout divides {n} GPUs with this model and the degrees given "
                        f"({given or 'none'}): num_gpus must be a multiple of TP x PP x CP (and equal it x DP "
                        f"when DP is given)")
    return layouts


def batch_for(cfg: PlanConfig, model: ModelShape, layout: Layout) -> dict[str, int]:
    """The global batch in whole micro-batches on every DP rank, and the micro-batches per step."""
    per_step = layout.dp * cfg.micro_batch_size
    sequences = -(-cfg.global_batch_tokens // model.seq_length)
    sequences = -(-sequences // per_step) * per_step
    return {"sequences": sequences, "tokens": sequences * model.seq_length, "microbatches": sequences // per_step,
            "raised": sequences * model.seq_length > cfg.global_batch_tokens + model.seq_length}


def choose_layout(model: ModelShape, cfg: PlanConfig) -> tuple[Layout, dict[str, float], bool]:
    """The first candidate whose memory fits; all degrees fixed means that layout, fitting or not."""
    limit = cfg.cluster.memory_bytes * cfg.memory.usable_fraction
    layouts = candidate_layouts(model, cfg)
    smallest: tuple[Layout, dict[str, float]] | None = None
    for layout in layouts:
        mem = estimate_memory(model, layout, cfg.micro_batch_size, batch_for(cfg, model, layout)["microbatches"],
                              cfg.memory)
        if mem["total"] <= limit:
            return layout, mem, True
        if smallest is None or mem["total"] < smallest[1]["total"]:
            smallest = (layout, mem)
    layout, mem = smallest
    if len(layouts) == 1 and cfg.layout.tp and cfg.layout.pp and cfg.layout.cp:
        return layout, mem, False
    raise PlanError(
        f"no layout fits: the leanest ({layout}) needs {mem['total'] / GIB:.1f} GiB per GPU, above "
        f"{cfg.memory.usable_fraction:g} x {cfg.cluster.memory_bytes / GIB:.0f} GiB of a {cfg.cluster.gpu} "
        f"(weights {mem['weights'] / GIB:.1f}, gradients {mem['gradients'] / GIB:.1f}, optimizer "
        f"{mem['optimizer'] / GIB:.1f}, activations {mem['activations'] / GIB:.1f}); try "
        f"-o memory.recompute=full, -o memory.distributed_optimizer=true, a shorter sequence, more GPUs "
        f"or a GPU with more memory")


def plan(cfg: PlanConfig, model: ModelShape) -> dict[str, Any]:
    """Every output of the planner, as plain numbers (the --json document)."""
    layout, mem, fits = choose_layout(model, cfg)
    batch = batch_for(cfg, model, layout)
    n, peak, mfu = cfg.cluster.num_gpus, cfg.cluster.peak_flops, cfg.mfu
    limit = cfg.cluster.memory_bytes * cfg.memory.usable_fraction

    memory_table = {}
    for distributed in (False, True):
        for mode in RECOMPUTE:
            settings = replace(cfg.memory, recompute=mode, distributed_optimizer=distributed)
            memory_table[f"{mode}{'_distributed' if distributed else ''}"] = estimate_memory(
                model, layout, cfg.micro_batch_size, batch["microbatches"], settings)["total"]
    other = replace(cfg, memory=replace(cfg.memory, distributed_optimizer=not cfg.memory.distributed_optimizer))
    try:
        other_layout = str(choose_layout(model, other)[0])
    except PlanError:
        other_layout = None

    palm = flops_per_token(model.non_embedding_params, model.num_layers, model.hidden_size, model.seq_length)
    per_token = 6.0 * model.params if cfg.flops_formula == "6n" else palm
    compute_s = cfg.tokens * per_token / (n * peak * mfu)
    step_s = batch["tokens"] * per_token / (n * peak * mfu)
    bubble = (layout.pp - 1) / (layout.virtual_stages * batch["microbatches"])
    warnings = []
    if not fits:
        warnings.append(f"the layout given does not fit: {mem['total'] / GIB:.1f} GiB per GPU, above "
                        f"{limit / GIB:.1f} GiB usable")
    if batch["raised"]:
        warnings.append(f"global batch raised to {batch['sequences']:,} sequences: every one of the {layout.dp:,} "
                        f"DP ranks needs a whole micro-batch")
    if bubble > 0.25:
        warnings.append(f"pipeline bubble {bubble:.0%} of the compute ({batch['microbatches']} micro-batches for "
                        f"{layout.pp} stages): {mfu:.0%} MFU overall is unlikely; raise global_batch_tokens or "
                        f"layout.virtual_stages")

    return {
        "inputs": {**asdict(cfg), "presets": sorted(cfg.presets)},
        "model": {**asdict(model), "params": model.params, "non_embedding_params": model.non_embedding_params},
        "layout": {**asdict(layout), "gpus": layout.gpus, "fits": fits,
                   "with_distributed_optimizer" if not cfg.memory.distributed_optimizer
                   else "without_distributed_optimizer": other_layout},
        "memory": {**mem, "limit": limit, "device": cfg.cluster.memory_bytes, "by_recompute": memory_table},
        "time": {"flops_per_token": per_token, "flops_per_token_6n": 6.0 * model.params,
                 "flops_per_token_palm": palm, "global_batch_sequences": batch["sequences"],
                 "global_batch_raised": batch["raised"],
                 "global_batch_tokens": batch["tokens"], "microbatches": batch["microbatches"],
                 "steps": math.ceil(cfg.tokens / batch["tokens"]), "step_s": step_s,
                 "bubble_fraction": bubble, "kernel_mfu_needed": mfu * (1 + bubble),
                 "tokens_per_s": cfg.tokens / compute_s, "days": compute_s / DAY_S,
                 "days_6n": compute_s * 6.0 * model.params / per_token / DAY_S,
                 "days_palm": compute_s * palm / per_token / DAY_S,
                 "communication_s": _communication(model, layout, cfg, batch["microbatches"])},
        "cost": {"gpu_hours": n * compute_s / 3600, "usd": n * compute_s / 3600 * cfg.cluster.price_per_gpu_hour},
        "reliability": _reliability(model, cfg, compute_s),
        "scaling": _scaling(model, cfg),
        "warnings": warnings,
    }


def _communication(model: ModelShape, layout: Layout, cfg: PlanConfig, microbatches: int) -> dict[str, float]:
    """Seconds per step each kind of traffic would take if nothing overlapped it with compute (an upper bound)."""
    t, p, dc = layout.tp, layout.pp, layout.dp * layout.cp
    activation = 2 * model.seq_length / layout.cp * cfg.micro_batch_size * model.hidden_size  # bf16 s b h
    intra, inter = cfg.cluster.intra_node_gb_s * 1e9, cfg.cluster.inter_node_gb_s * 1e9
    all_reduces = 6 if cfg.memory.recompute == "full" else 4
    tp = microbatches * model.num_layers / p * all_reduces * 2 * (t - 1) / t * activation / intra
    grads = stage_params(model, layout, cfg.memory.vocab_multiple) * BYTES_PER_PARAM[cfg.memory.precision][1]
    dp = 2 * (dc - 1) / dc * grads / inter
    pp = 0.0 if p == 1 else microbatches * 2 * activation / t / inter
    return {"tp": tp, "dp": dp, "pp": pp}


def _reliability(model: ModelShape, cfg: PlanConfig, compute_s: float) -> dict[str, float]:
    r, n = cfg.reliability, cfg.cluster.num_gpus
    per_hour = r.failures_per_gpu_hour * n
    mtbf_s = 3600 / per_hour
    checkpoint = r.checkpoint_bytes_per_param * model.params
    write_s = checkpoint / (r.checkpoint_write_gb_s * 1e9)
    interval_s = math.sqrt(2 * write_s * mtbf_s)
    lost_per_failure_s = interval_s / 2 + r.restart_minutes * 60
    useful = 1 / (1 + write_s / interval_s) * (1 - lost_per_failure_s / mtbf_s)
    wall_s = compute_s / useful if useful > 0 else math.inf
    return {"failures_per_hour": per_hour, "mtbf_hours": mtbf_s / 3600,
            "expected_failures": per_hour * compute_s / 3600, "expected_failures_wall": per_hour * wall_s / 3600,
            "checkpoint_bytes": checkpoint, "checkpoint_write_s": write_s, "checkpoint_interval_s": interval_s,
            "useful_fraction": max(useful, 0.0), "wall_days": wall_s / DAY_S}


def _scaling(model: ModelShape, cfg: PlanConfig) -> dict[str, Any]:
    sc = cfg.scaling
    compute = sc.compute_flops or 6.0 * model.params * cfg.tokens

    def loss(n: float, d: float) -> float:
        return sc.loss_e + sc.loss_a / n ** sc.alpha + sc.loss_b / d ** sc.beta

    rule_n = math.sqrt(compute / (6 * sc.tokens_per_param))
    g = (sc.alpha * sc.loss_a / (sc.beta * sc.loss_b)) ** (1 / (sc.alpha + sc.beta))
    fit_n = g * (compute / 6) ** (sc.beta / (sc.alpha + sc.beta))
    fit_d = compute / (6 * fit_n)
    result: dict[str, Any] = {
        "compute_flops": compute, "tokens_per_param": cfg.tokens / model.params,
        "loss": loss(model.params, cfg.tokens),
        "rule": {"params": rule_n, "tokens": sc.tokens_per_param * rule_n},
        "fit": {"params": fit_n, "tokens": fit_d, "loss": loss(fit_n, fit_d)},
        "inference_aware": None}
    if sc.inference_tokens:
        result["inference_aware"] = _inference_aware(loss(fit_n, fit_d), fit_n, fit_d, sc)
    return result


def _inference_aware(target: float, fit_n: float, fit_d: float, sc: ScalingConfig) -> dict[str, float]:
    """The model that reaches the Chinchilla-optimal loss for the least training + inference compute."""
    def train_tokens(n: float) -> float:
        gap = target - sc.loss_e - sc.loss_a / n ** sc.alpha
        return (sc.loss_b / gap) ** (1 / sc.beta) if gap > 0 else math.inf

    def total(log_n: float) -> float:
        n = math.exp(log_n)
        return 6 * n * train_tokens(n) + 2 * n * sc.inference_tokens

    low = math.log((sc.loss_a / (target - sc.loss_e)) ** (1 / sc.alpha)) + 1e-9  # below it no data reaches target
    high = math.log(fit_n) + 1e-9  # a larger model costs more to train and to serve
    for _ in range(200):  # golden-section search: the cost is unimodal in log N
        a, b = high - (high - low) / 1.618034, low + (high - low) / 1.618034
        low, high = (low, b) if total(a) < total(b) else (a, high)
    n = math.exp((low + high) / 2)
    chinchilla_total = 6 * fit_n * fit_d + 2 * fit_n * sc.inference_tokens
    return {"params": n, "tokens": train_tokens(n), "train_flops": 6 * n * train_tokens(n),
            "total_flops": total(math.log(n)), "chinchilla_total_flops": chinchilla_total}


# --- the command line -------------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m trainer.plan",
        description="Training-run planner: TP/PP/CP/DP layout, memory per GPU, step time, days, cost, failures, "
                    "checkpoint interval and the compute-optimal model size.",
        epilog="Defaults: conf/trainer_plan.yaml (and $WEBLM_CONF_OVERLAY); -o KEY=VALUE changes any of them, "
               "-o model.KEY=VALUE one field of the model. Formulas: trainer/plan.py's docstring.")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON (for machines)")
    ap.add_argument("--model", help="a preset (7b, 8b, 13b, 70b, 405b) or `trainer` (conf/trainer.yaml's model)")
    ap.add_argument("--gpus", metavar="N", help="GPUs in the job (cluster.num_gpus)")
    ap.add_argument("--gpu", metavar="NAME", help="GPU type, e.g. H100, H200, A100 (cluster.gpu)")
    ap.add_argument("--tokens", metavar="N", help="training tokens, e.g. 15e12")
    ap.add_argument("--mfu", metavar="X", help="assumed model-FLOPs utilisation, e.g. 0.4")
    ap.add_argument("--price", metavar="USD", help="price per GPU-hour (cluster.price_per_gpu_hour)")
    ap.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                    help="any setting of conf/trainer_plan.yaml, dotted (-o layout.tp=8, -o model.seq_length=4096)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = vars(ap.parse_args(argv))
    as_json, overrides = args.pop("json"), args.pop("override")
    try:
        result = plan(*load_plan(args, overrides))
    except (ConfigError, ValueError) as exc:  # PlanError is a ValueError
        ap.error(str(exc))  # exits 2
    try:
        print(json.dumps(result, indent=2) if as_json else render(result), flush=True)
    except BrokenPipeError:  # `| head` has read what it wanted; keep Python's exit flush from failing too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
