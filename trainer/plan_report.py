"""The planner's readable report: `render(plan(...))` is what `python -m trainer.plan` prints without --json."""
from __future__ import annotations

from typing import Any

from trainer.plan_config import GIB, RECOMPUTE, Layout

def render(result: dict[str, Any]) -> str:
    i, m, lay, mem = result["inputs"], result["model"], result["layout"], result["memory"]
    t, r, sc = result["time"], result["reliability"], result["scaling"]
    c = i["cluster"]
    layout = Layout(lay["tp"], lay["pp"], lay["cp"], lay["dp"], lay["virtual_stages"])
    lines = [f"Training plan: {_si(m['params'])} parameters ({i['model']}), {_si(i['tokens'])} tokens on "
             f"{c['num_gpus']:,} {c['gpu']} at {i['mfu']:.0%} MFU: {layout}, {t['days']:.1f} days, "
             f"{_si(result['cost']['gpu_hours'])} GPU-hours, ${_si(result['cost']['usd'])}"]
    lines.extend(f"WARNING: {warning}" for warning in result["warnings"])

    table: list[tuple[str, str, str] | str] = []

    def section(title: str, *rows: tuple[str, str, str]) -> None:
        table.extend(["", title, *rows])

    section("model",
            ("shape", f"{m['num_layers']} x {m['hidden_size']}",
             f"{m['num_attention_heads']} heads, {m['num_query_groups']} query groups, FFN {m['ffn_hidden_size']:,}"
             f"{' SwiGLU' if m['gated_linear_unit'] else ''}, vocab {m['vocab_size']:,}, sequence {m['seq_length']:,}"),
            ("parameters", _si(m["params"]), f"{_si(m['non_embedding_params'])} outside the embeddings"))
    alt_key = next(k for k in lay if k.endswith("distributed_optimizer"))
    section("layout",
            ("chosen", str(layout), "TP within the node first, then PP, then CP: the first whose memory fits"),
            (alt_key.replace("_", " "), lay[alt_key] or "none fits", "the same search with the other optimizer"))
    gib = lambda x: f"{x / GIB:.1f} GiB"  # noqa: E731
    opt = i["memory"]
    section(f"memory per GPU (first stage, {opt['recompute']} recompute, "
            f"{'distributed' if opt['distributed_optimizer'] else 'replicated'} optimizer)",
            ("weights", gib(mem["weights"]), f"{opt['precision']}"),
            ("gradients", gib(mem["gradients"]), "fp32 main gradients"),
            ("optimizer states", gib(mem["optimizer"]), "fp32 master weights, Adam m and v"),
            ("activations", gib(mem["activations"]),
             f"micro-batch {i['micro_batch_size']}, {t['microbatches']} micro-batches per step"),
            ("total", gib(mem["total"]), f"of {gib(mem['limit'])} usable ({opt['usable_fraction']:g} x "
                                         f"{gib(mem['device'])})"),
            *((f"total, recompute {mode}", gib(mem["by_recompute"][mode]),
               f"{gib(mem['by_recompute'][mode + '_distributed'])} with the distributed optimizer")
              for mode in RECOMPUTE))
    com = t["communication_s"]
    section("time",
            ("FLOPs per token", f"{t['flops_per_token']:.3g}",
             f"{i['flops_formula']}; 6N = {t['flops_per_token_6n']:.3g}, PaLM = {t['flops_per_token_palm']:.3g}"),
            ("global batch", f"{t['global_batch_sequences']:,} seq",
             f"{_si(t['global_batch_tokens'])} tokens, {t['microbatches']} micro-batches per DP rank"),
            ("step", f"{t['step_s']:.2f} s", f"{t['steps']:,} steps; {_si(t['tokens_per_s'])} tokens/s"),
            ("pipeline bubble", f"{t['bubble_fraction']:.1%}",
             f"(p-1)/(v m); kernels must reach {t['kernel_mfu_needed']:.1%} MFU for {i['mfu']:.0%} overall"),
            ("communication if not overlapped", f"{com['tp'] + com['dp'] + com['pp']:.2f} s",
             f"per step: TP {com['tp']:.2f}, DP {com['dp']:.2f}, PP {com['pp']:.3f}"),
            ("training time", f"{t['days']:.1f} days",
             f"compute only, at the assumed MFU ({t['days_6n']:.1f} counting 6N, {t['days_palm']:.1f} PaLM)"))
    section("cost",
            ("GPU-hours", _si(result["cost"]["gpu_hours"]), ""),
            ("cost", f"${_si(result['cost']['usd'])}", f"at ${c['price_per_gpu_hour']:g} per GPU-hour"))
    section("failures and checkpoints",
            ("failure rate", f"{r['failures_per_hour']:.3g} /h",
             f"one every {r['mtbf_hours']:.1f} h ({i['reliability']['failures_per_gpu_hour']:.3g} per GPU-hour, "
             f"Llama 3)"),
            ("expected failures", f"{r['expected_failures']:.0f}", f"{r['expected_failures_wall']:.0f} over the wall "
                                                                   f"time"),
            ("checkpoint", f"{r['checkpoint_bytes'] / 1e12:.2f} TB",
             f"{i['reliability']['checkpoint_bytes_per_param']:g} B/param; {r['checkpoint_write_s']:.1f} s to write"),
            ("checkpoint interval", f"{r['checkpoint_interval_s'] / 60:.0f} min", "Young/Daly sqrt(2 x write x MTBF)"),
            ("wall time", f"{r['wall_days']:.1f} days", f"{r['useful_fraction']:.1%} of it training"))
    fit, rule, inf = sc["fit"], sc["rule"], sc["inference_aware"]
    section(f"compute-optimal for C = 6ND = {sc['compute_flops']:.3g} FLOPs",
            ("this run", f"{_si(m['params'])} x {_si(i['tokens'])}",
             f"{sc['tokens_per_param']:.0f} tokens/param, loss {sc['loss']:.3f}"),
            ("Chinchilla, D = 20 N", f"{_si(rule['params'])} x {_si(rule['tokens'])}", ""),
            ("Chinchilla fit", f"{_si(fit['params'])} x {_si(fit['tokens'])}", f"loss {fit['loss']:.3f}"),
            *([("inference-aware", f"{_si(inf['params'])} x {_si(inf['tokens'])}",
                f"same loss, serving {_si(i['scaling']['inference_tokens'])} tokens: "
                f"{inf['total_flops'] / inf['chinchilla_total_flops']:.0%} of the compute")] if inf else []))
    rows = [row for row in table if isinstance(row, tuple)]
    width = [max(len(row[k]) for row in rows) for k in (0, 1)]
    lines.extend(row if isinstance(row, str) else f"  {row[0]:<{width[0]}}  {row[1]:>{width[1]}}  {row[2]}".rstrip()
                 for row in table)
    return "\n".join(lines)


def _si(x: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.3g}"
