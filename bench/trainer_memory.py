"""Benchmark: the trainer's memory estimate (trainer/fit.py, the planner's formula) against the memory a
forward and backward pass really takes on the cpu backend, for growing sequence lengths.

    .venv/bin/python bench/trainer_memory.py [SEQ ...]      (default: 512 1024 2048 4096)

Each length runs in its own child process (peak RSS only grows): the model is built, then one micro-batch
of `batch.micro_batch_size` sequences with a document mask goes forward and backward; the growth of the
peak RSS over that pass is compared with the estimate's activations and mask.  Prints one JSON line per
length with the ratio measured / estimated (the check refuses runs whose estimate passes the device).
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VOCAB = 4096
MODEL = ["model.num_layers=4", "model.hidden_size=128", "model.num_attention_heads=4", "model.ffn_hidden_size=512"]


def probe(seq: int, micro_batch: int = 8) -> dict:
    import torch

    from trainer.backend import open_backend
    from trainer.config import load_trainer_config
    from trainer.fit import run_estimate
    from trainer.model import build_model

    cfg = load_trainer_config(MODEL + [f"model.seq_length={seq}", f"batch.micro_batch_size={micro_batch}",
                                       f"batch.global_batch_size={micro_batch}"])
    with open_backend(cfg):
        model = build_model(cfg.model, vocab_size=VOCAB)
        tokens = torch.randint(0, VOCAB, (micro_batch, seq))
        positions = torch.arange(seq).expand(micro_batch, -1)
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1).expand(micro_batch, 1, seq, seq).contiguous()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        model(tokens, positions, mask, labels=torch.roll(tokens, -1, 1)).mean().backward()
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    parts = run_estimate(cfg, VOCAB)
    estimated = parts["activations"] + parts.get("attention_mask", 0)
    return {"seq_length": seq, "micro_batch": micro_batch, "measured_gib": round(grown / 2 ** 30, 3),
            "estimated_gib": round(estimated / 2 ** 30, 3), "measured_over_estimate": round(grown / estimated, 2)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--probe"]:
        print(json.dumps(probe(int(argv[1]))))
        return 0
    for seq in [int(s) for s in argv] or [512, 1024, 2048, 4096]:
        out = subprocess.run([sys.executable, __file__, "--probe", str(seq)], capture_output=True, text=True,
                             check=True)
        print(out.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
