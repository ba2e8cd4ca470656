"""trainer/plan.py: the training-run planner's worked examples, its memory model against Megatron's, its command line.

(Named test_run_plan.py: tests/spider/test_plan.py already holds the basename test_plan.py.)
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from conf import CONF_DIR, read_section
from trainer.plan import estimate_memory, main, plan
from trainer.plan_config import GIB, Layout, ModelShape, PlanError, load_plan
from trainer.plan_report import render

CHECKOUT = CONF_DIR.parent
MIB = 2 ** 20


@pytest.fixture(autouse=True)
def checkout_conf_only(monkeypatch):
    """Plan from the checkout's conf/ alone, whatever overlay the shell running the tests has set."""
    for name in ("WEBLM_CONF_OVERLAY", "WEBLM_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """`python -m trainer.plan ARGS` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def planned(*overrides: str, **flags) -> dict:
    return plan(*load_plan(flags, overrides))


def memory_settings(**changes):
    cfg, _ = load_plan({}, [])
    return replace(cfg.memory, **changes)


LLAMA2_7B = ModelShape(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=32,
                       ffn_hidden_size=11008, vocab_size=32000, seq_length=4096, gated_linear_unit=True,
                       share_embeddings=False, normalization="RMSNorm")


# --- the worked examples ------------------------------------------------------------------------------------------

def test_70b_on_2048_h100_for_15t_tokens_is_tp8_pp4_dp64_in_about_73_days():
    command = ["-m", "trainer.plan", "--json", "--model", "70b", "--gpus", "2048", "--gpu", "H100", "--tokens", "15e12",
               "--mfu", "0.5"]
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    out = subprocess.run([sys.executable, *command], cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    layout = result["layout"]
    assert (layout["tp"], layout["pp"], layout["cp"], layout["dp"]) == (8, 4, 1, 64)
    assert layout["fits"] is True
    assert result["model"]["params"] == 70_553_706_496  # Llama 3 70B: "70.6 B"
    assert result["time"]["days"] == pytest.approx(73, rel=0.02)  # 6 x 70.55e9 x 15e12 / (2,048 x 989e12 x 0.5)
    assert result["cost"]["gpu_hours"] == pytest.approx(2048 * 24 * result["time"]["days"])
    # TP8 x PP2 would not fit with a replicated optimizer: 4.4 B params x 18 B = 79 GB before activations
    assert 55 * GIB < result["memory"]["total"] <= result["memory"]["limit"] == pytest.approx(0.9 * 80 * GIB)
    assert result["reliability"]["checkpoint_bytes"] == pytest.approx(1e12, rel=0.02)  # "~1 TB" (14 B/param)


def test_the_default_plan_is_the_worked_example_in_words(capsys):
    code, text, _ = cli(capsys)
    assert code == 0
    assert text.startswith("Training plan: 70.6 B parameters (70b), 15 T tokens on 2,048 H100 at 50% MFU: "
                                 "TP 8, PP 4, CP 1, DP 64, 72.6 days")
    for section in ("model", "layout", "time", "cost", "failures and checkpoints"):
        assert f"\n{section}\n" in text
    assert "0.99 TB" in text and "Young/Daly" in text


def test_the_failure_rate_is_llama_3s_and_gives_a_failure_a_day_at_2000_gpus():
    """Llama 3's 419 unexpected interruptions in 54 days on 16,384 H100 come back from the rate; at 2,000 GPUs
    that is one failure every ~25 h.  (The issue's "every ~30 min at 2,000 GPUs" reads the rate per GPU-minute:
    2,000 x 1.97e-5 per minute is one every 25 min.)"""
    llama3 = planned("cluster.num_gpus=16384", "layout.tp=8", "layout.pp=16", "layout.cp=1")
    reliability = llama3["reliability"]
    assert reliability["failures_per_hour"] * 54 * 24 == pytest.approx(419, rel=0.01)
    assert reliability["mtbf_hours"] == pytest.approx(3.1, abs=0.05)
    at_2000 = planned("cluster.num_gpus=2000", "layout.tp=8", "layout.pp=5", "layout.cp=1")["reliability"]
    assert at_2000["mtbf_hours"] == pytest.approx(25.4, abs=0.1)


def test_young_daly_interval_and_wall_time_follow_from_the_checkpoint_and_the_mtbf():
    r = planned()["reliability"]
    write_s = 14 * 70_553_706_496 / 100e9
    assert r["checkpoint_write_s"] == pytest.approx(write_s)
    assert r["checkpoint_interval_s"] == pytest.approx(math.sqrt(2 * write_s * r["mtbf_hours"] * 3600))
    assert r["expected_failures"] == pytest.approx(r["failures_per_hour"] * 24 * planned()["time"]["days"])
    assert 0.9 < r["useful_fraction"] < 1 and r["wall_days"] > planned()["time"]["days"]
    slow = planned("reliability.checkpoint_write_gb_s=1")["reliability"]
    assert slow["checkpoint_interval_s"] == pytest.approx(r["checkpoint_interval_s"] * 10)  # sqrt(100)


# --- the memory model ---------------------------------------------------------------------------------------------

def megatron_theoretical_memory(args, num_microbatches):
    """Megatron-LM megatron/training/theoretical_memory_usage.py (commit 00caa53), dense-GPT path, transcribed:
    compute_weight_and_optimizer_memory and compute_activation_memory (SP + selective recompute), in MiB."""
    query_ratio = args.kv_channels * args.num_attention_heads / args.hidden_size
    gated = 3 / 2 if args.swiglu else 1
    norm = 1 if args.normalization == "RMSNorm" else 2
    attention = 2 * args.hidden_size * args.hidden_size * (
        (1 + args.num_query_groups / args.num_attention_heads) * query_ratio)
    layer = 2 * args.hidden_size * (args.ffn_hidden_size * gated + norm) + attention
    embedding = args.hidden_size * args.padded_vocab_size
    block = layer * args.num_layers + norm * args.hidden_size
    shard = (block / args.pipeline_model_parallel_size + embedding) / args.tensor_model_parallel_size
    if args.untie_embeddings_and_output_weights and args.pipeline_model_parallel_size == 1:
        shard += embedding / args.tensor_model_parallel_size
    per_param = 18 if not args.use_distributed_optimizer else 6 + 12 / args.data_parallel_size
    s, b, h, p = args.seq_length, args.micro_batch_size, args.hidden_size, args.pipeline_model_parallel_size
    activation = s * b * h * (18 + 4 * args.ffn_hidden_size / h) * args.num_layers
    activation += 8 * s * b * p + s * b * h * p
    if p > 1 and num_microbatches is not None:
        activation *= min(1, num_microbatches / p)
    if p == 1:
        activation += s * b * h * 4 * (1 + args.padded_vocab_size / h)
    return shard * per_param / MIB, activation / args.tensor_model_parallel_size / MIB


@pytest.mark.parametrize("pp, microbatches, distributed, weights_mib, activations_mib", [
    (2, 8, True, 12049.226, 7376.031),      # Llama 2 7B, TP 2, DP 8, sequence 4,096, micro-batch 1
    (1, None, False, 57836.285, 7650.016),
    (4, 2, True, 6258.988, 3696.031),       # fewer micro-batches than stages: half the activations
])
def test_memory_matches_megatrons_theoretical_memory_usage(pp, microbatches, distributed, weights_mib,
                                                           activations_mib):
    args = SimpleNamespace(kv_channels=128, num_attention_heads=32, num_query_groups=32, hidden_size=4096,
                           swiglu=True, normalization="RMSNorm", ffn_hidden_size=11008, num_layers=32,
                           padded_vocab_size=32000, untie_embeddings_and_output_weights=True,
                           pipeline_model_parallel_size=pp, tensor_model_parallel_size=2,
                           use_distributed_optimizer=distributed, data_parallel_size=8, seq_length=4096,
                           micro_batch_size=1)
    theirs = megatron_theoretical_memory(args, microbatches)
    assert theirs == pytest.approx((weights_mib, activations_mib), abs=1e-3)
    ours = estimate_memory(LLAMA2_7B, Layout(tp=2, pp=pp, cp=1, dp=8), micro_batch_size=1,
                           num_microbatches=microbatches,
                           memory=memory_settings(distributed_optimizer=distributed, recompute="selective",
                                                  sequence_parallel=True))
    assert (ours["weights"] + ours["gradients"] + ours["optimizer"]) / MIB == pytest.approx(weights_mib, abs=1e-3)
    assert ours["activations"] / MIB == pytest.approx(activations_mib, abs=1e-3)
    assert ours["total"] == pytest.approx(sum(v for k, v in ours.items() if k != "total"))


def per_layer_activations(t: int, **memory) -> float:
    """One layer's activation bytes: the difference a second layer makes (GPT-style f = 4h, a = 32, s = 2048)."""
    def shape(layers):
        return ModelShape(layers, 4096, 32, 32, 4 * 4096, 51200, 2048, False, True, "LayerNorm")
    settings = memory_settings(**memory)
    one, two = (estimate_memory(shape(n), Layout(t, 1, 1, 1), 1, None, settings)["activations"] for n in (1, 2))
    return two - one


SCORES = 5 * 32 * 2048 / 4096  # 5as/h: the attention scores, softmax and its dropout mask


@pytest.mark.parametrize("memory, table_2_row", [
    (dict(recompute="none", sequence_parallel=False, flash_attention=False), lambda t: 10 + 24 / t + SCORES / t),
    (dict(recompute="none", sequence_parallel=True, flash_attention=False), lambda t: (34 + SCORES) / t),
    (dict(recompute="selective", sequence_parallel=False), lambda t: 10 + 24 / t),
    (dict(recompute="selective", sequence_parallel=True), lambda t: 34 / t),
    (dict(recompute="none", sequence_parallel=True, flash_attention=True), lambda t: 34 / t),  # flash: no scores
    (dict(recompute="full", sequence_parallel=True), lambda t: 2 / t),
])
def test_activations_per_layer_are_korthikanti_table_2(memory, table_2_row):
    sbh = 2048 * 1 * 4096
    for t in (2, 8):
        assert per_layer_activations(t, **memory) == pytest.approx(sbh * table_2_row(t))


def test_the_distributed_optimizer_shards_12_of_18_bytes_per_parameter_over_dp():
    layout = Layout(tp=1, pp=1, cp=1, dp=64)
    plain = estimate_memory(LLAMA2_7B, layout, 1, None, memory_settings(distributed_optimizer=False))
    sharded = estimate_memory(LLAMA2_7B, layout, 1, None, memory_settings(distributed_optimizer=True))
    params = plain["weights"] / 2
    assert plain["gradients"] == 4 * params and plain["optimizer"] == 12 * params
    assert sharded["optimizer"] == pytest.approx(12 * params / 64)
    fp32 = estimate_memory(LLAMA2_7B, layout, 1, None, memory_settings(precision="fp32", distributed_optimizer=True))
    assert fp32["weights"] + fp32["gradients"] + fp32["optimizer"] == pytest.approx((8 + 8 / 64) * params)


def test_estimate_memory_lets_the_trainer_refuse_a_sequence_that_cannot_fit():
    """8B on 8 H100 (80 GiB), DP 8, distributed optimizer, full recompute: 8,192 tokens fit, 131,072 do not."""
    _, llama3_8b = load_plan({"model": "8b"}, [])
    settings = memory_settings(recompute="full", distributed_optimizer=True)
    data_parallel = Layout(tp=1, pp=1, cp=1, dp=8)
    fits = estimate_memory(llama3_8b, data_parallel, 1, None, settings)["total"]
    too_long = estimate_memory(replace(llama3_8b, seq_length=131_072), data_parallel, 1, None, settings)["total"]
    assert fits < 72 * GIB < too_long
    with pytest.raises(PlanError, match="seq_length must be a positive"):
        replace(llama3_8b, seq_length=0)


def test_the_bubble_and_step_time_follow_the_layout():
    result = planned()
    t = result["time"]
    assert t["microbatches"] == 2048 // 64 and t["global_batch_sequences"] == 2048 and not t["global_batch_raised"]
    assert result["warnings"] == []
    wide = planned("cluster.num_gpus=32768")  # DP 1,024: 2 micro-batches for 4 stages
    assert wide["time"]["bubble_fraction"] == pytest.approx(3 / 2)
    assert any("pipeline bubble 150%" in w for w in wide["warnings"])
    wider = planned("cluster.num_gpus=131072")  # DP 4,096 > 2,048 sequences: one each, at least
    assert wider["time"]["global_batch_sequences"] == 4096 and wider["time"]["global_batch_raised"]
    assert any("global batch raised to 4,096 sequences" in w for w in wider["warnings"])
    assert t["bubble_fraction"] == pytest.approx(3 / 32)  # (p - 1) / m
    assert t["step_s"] * t["steps"] == pytest.approx(t["days"] * 86_400, rel=1e-4)
    interleaved = planned("layout.tp=8", "layout.pp=4", "layout.cp=1", "layout.virtual_stages=5")["time"]
    assert interleaved["bubble_fraction"] == pytest.approx(3 / (5 * 32))
    palm = planned("flops_formula=palm")["time"]
    assert palm["days"] == pytest.approx(t["days_palm"]) and palm["days"] > t["days"]  # s = 8,192 adds 12 L h s


def test_long_sequences_bring_in_context_parallelism_only_when_nothing_else_fits():
    """At 131,072 tokens one layer's activations are 4 GiB per GPU even at TP 8; PP does not shrink them (the first
    stage holds p micro-batches of L/p layers), CP does."""
    result = planned("model.seq_length=131072", "memory.distributed_optimizer=true")
    layout = result["layout"]
    assert (layout["tp"], layout["pp"], layout["cp"], layout["dp"]) == (8, 2, 8, 16) and layout["fits"]
    assert planned("model.seq_length=131072", "memory.distributed_optimizer=true",
                   "memory.recompute=full")["layout"]["cp"] == 1  # keeping only layer inputs is enough
    assert planned()["layout"]["cp"] == 1


def test_compute_optimal_sizes_for_the_runs_compute():
    result = planned()
    sc = result["scaling"]
    c = 6 * 70_553_706_496 * 15e12
    assert sc["compute_flops"] == pytest.approx(c)
    assert sc["rule"]["params"] == pytest.approx(math.sqrt(c / 120)) and sc["rule"]["tokens"] == pytest.approx(
        20 * math.sqrt(c / 120))
    fit = sc["fit"]
    assert 6 * fit["params"] * fit["tokens"] == pytest.approx(c)

    def loss(n):  # on the same compute, any other split loses
        return 1.69 + 406.4 / n ** 0.34 + 410.7 / (c / (6 * n)) ** 0.28
    assert loss(fit["params"]) < min(loss(fit["params"] * 0.9), loss(fit["params"] * 1.1))
    inference = sc["inference_aware"]  # serving tokens favours a smaller model trained longer, at the same loss
    assert inference["params"] < fit["params"] and inference["tokens"] > fit["tokens"]
    assert loss_at(inference["params"], inference["tokens"]) == pytest.approx(fit["loss"], abs=1e-6)
    assert inference["total_flops"] < inference["chinchilla_total_flops"]
    assert planned("scaling.inference_tokens=0")["scaling"]["inference_aware"] is None
    gopher = planned("scaling.compute_flops=5.76e23")["scaling"]  # Chinchilla's own budget: 70 B x 1.4 T by the rule
    assert gopher["rule"]["params"] == pytest.approx(69.3e9, rel=0.01)
    assert gopher["rule"]["tokens"] == pytest.approx(1.39e12, rel=0.01)


def loss_at(n: float, d: float) -> float:
    return 1.69 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28


def test_the_trainers_own_model_section_can_be_planned():
    trainer_model = read_section("trainer")["model"]
    result = planned(model="trainer", gpus="1", gpu="A10", tokens="1e9")
    m = result["model"]
    assert (m["num_layers"], m["hidden_size"]) == (trainer_model["num_layers"], trainer_model["hidden_size"])
    assert m["vocab_size"] == 32000 and m["gated_linear_unit"] is False  # conf/trainer_plan.yaml trainer_model
    assert result["layout"]["tp"] == 1 and result["memory"]["device"] == 24 * GIB
    longer = planned("model.seq_length=1024", model="trainer", gpus="1", gpu="A10")
    assert longer["model"]["seq_length"] == 1024


# --- output and bad input -----------------------------------------------------------------------------------------

def test_json_has_every_section_as_plain_numbers(capsys):
    code, text, _ = cli(capsys, "--json", "--model", "8b", "--gpus", "64")
    assert code == 0
    result = json.loads(text)
    assert set(result) == {"inputs", "model", "layout", "memory", "time", "cost", "reliability", "scaling",
                           "warnings"}
    assert set(result["memory"]) >= {"weights", "gradients", "optimizer", "activations", "total", "by_recompute"}
    assert set(result["memory"]["by_recompute"]) == {"none", "selective", "full", "none_distributed",
                                                     "selective_distributed", "full_distributed"}
    assert result["layout"]["gpus"] == 64 and "with_distributed_optimizer" in result["layout"]
    assert result["inputs"]["cluster"]["num_gpus"] == 64 and result["inputs"]["presets"] == ["13b", "405b", "70b",
                                                                                              "7b", "8b"]
    assert render(result).startswith("Training plan: 8.03 B parameters (8b)")


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "cluster.num_gpus must be above 0"),
    (["--tokens=-1e12"], "tokens must be above 0"),
    (["--mfu", "1.5"], "mfu is a fraction"),
    (["-o", "model.num_layers=-4"], "model.num_layers must be a positive whole number"),
    (["-o", "model.hidden_size=0"], "model.hidden_size must be a positive whole number"),
    (["-o", "micro_batch_size=0"], "micro_batch_size must be above 0"),
    (["-o", "layout.tp=3"], "layout does not divide: TP 3 must divide the heads (64)"),
    (["-o", "layout.pp=100"], "PP 100 must be at most num_layers (80)"),
    (["--gpus", "1000", "-o", "layout.tp=8", "-o", "layout.pp=3", "-o", "layout.cp=1"],
     "no TP x PP x CP x DP layout divides 1000 GPUs with this model and the degrees given (TP 8, PP 3, CP 1)"),
    (["-o", "layout.cp=3"], "CP 3 must divide num_gpus (2048) and 2 x CP the sequence (8192)"),
    (["-o", "model.gated_linear_unit=maybe"], "model.gated_linear_unit must be true or false"),
    (["--gpus", "1.5"], "cluster.num_gpus must be int"),
    (["-o", "layout.dp=7"], "equal it x DP"),
    (["--model", "405b", "--gpus", "8", "--gpu", "A10"], "no layout fits: the leanest"),
    (["--model", "900b"], "unknown model '900b'"),
    (["--gpu", "TPU v5"], "GPU 'TPU v5' is not in trainer/flops.py's and trainer/plan_config.py's tables"),
    (["--gpu", "A100", "-o", "cluster.memory_gib=-1"], "memory_gib must be 0 or more"),
    (["-o", "cluster.bogus=1"], "unknown setting(s) ['bogus']"),
    (["-o", "model.bogus=1"], "unknown model setting(s) ['bogus']"),
    (["--tokens", "lots"], "must be float"),
    (["-o", "memory.recompute=sometimes"], "memory.recompute must be one of none, selective, full"),
])
def test_bad_input_is_a_clear_error_with_exit_code_2(capsys, args, message):
    code, out, err = cli(capsys, *args)  # any other exception would escape main() and fail the test
    assert (code, out) == (2, "")
    assert "python -m trainer.plan: error: " in err and message in err


def test_a_fixed_layout_that_does_not_fit_is_reported_as_such():
    result = planned("layout.tp=1", "layout.pp=1", "layout.cp=1")
    assert result["layout"]["fits"] is False and result["memory"]["total"] > result["memory"]["limit"]
    assert "WARNING: the layout given does not fit" in render(result)


def test_a_bad_command_line_exits_2_without_a_traceback_in_a_real_process():
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    out = subprocess.run([sys.executable, "-m", "trainer.plan", "--model", "405b", "--gpus", "8", "--gpu", "A10"],
                         cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "no layout fits" in out.stderr


def test_presets_have_their_published_sizes(capsys):
    for preset, params in (("7b", 6_738_415_616), ("13b", 13_015_864_320), ("8b", 8_030_261_248)):
        code, text, _ = cli(capsys, "--model", preset, "--gpus", "8", "--json")
        assert code == 0 and json.loads(text)["model"]["params"] == params  # Hugging Face's counts
