"""Downstream evaluation on multiple-choice tasks given as local JSONL files (HellaSwag/ARC style).

Each line is one example: a context, its choices and the index of the right one.  Accepted field names:
context (`context`, `ctx`, `query`, `question`), choices (`choices`, `endings`; a list of strings, or ARC's
`{"text": [...], "label": [...]}`), answer (`answer`, `label`, `gold`, `answerKey`: an index, or a label
such as "B").  A line that does not parse is skipped with a count and a message.

Scoring is lm-evaluation-harness's: each choice's log-likelihood given the context, summed over the
choice's tokens (the tokens of `encode(context + continuation)` past those of `encode(context)`);
`acc` takes the argmax of the sum, `acc_norm` of the sum divided by the continuation's length in bytes.
The continuation is `" " + choice` unless the choice already starts with white space.  Sequences longer
than the model's `seq_length` lose tokens from the left of the context.  Every rank computes the same
figures (tensor-parallel ranks must run the forward together); rank 0 logs them.  How the model scores a
micro-batch is the engine's (`TokenLogProbs`): one forward pass per micro-batch in one process
(`model_log_probs`), or under pipeline parallelism megatron's schedule, whose last stage computes the
log-probabilities and hands them to every stage (trainer/engine.py).
Not lm-evaluation-harness itself: it would bring its datasets and evaluate dependencies into the trainer for one rule.
"""
from __future__ import annotations

import json
import logging
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from conf import ConfigError

log = logging.getLogger(__name__)
Encode = Callable[[str], list[int]]
# (inputs, targets) micro-batches, each [batch, width] -> log p(target | the inputs up to it) per position, each
# [batch, width], on every rank
TokenLogProbs = Callable[[Sequence[tuple[torch.Tensor, torch.Tensor]]], list[torch.Tensor]]


@dataclass(frozen=True)
class Example:
    context: str
    choices: tuple[str, ...]
    answer: int


@dataclass(frozen=True)
class Task:
    name: str
    examples: tuple[Example, ...]
    skipped: int                    # lines that were not a whole example


def _first(record: dict, names: Sequence[str]):
    return next((record[n] for n in names if n in record), None)


def parse_example(record: dict) -> Example:
    """One JSONL record as an Example; ValueError says what is missing or wrong."""
    context = _first(record, ("context", "ctx", "query", "question"))
    choices = _first(record, ("choices", "endings"))
    answer = _first(record, ("answer", "label", "gold", "answerKey"))
    labels = None
    if isinstance(context, dict):     # ARC: question {"stem": ..., "choices": [...]}
        choices = choices or context.get("choices")
        context = context.get("stem")
    if isinstance(choices, dict):     # ARC on the Hub: {"text": [...], "label": ["A", ...]}
        choices, labels = choices.get("text"), choices.get("label")
    elif isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choices, labels = [c.get("text") for c in choices], [c.get("label") for c in choices]
    if not isinstance(context, str) or not isinstance(choices, list) or len(choices) < 2 \
            or not all(isinstance(c, str) and c for c in choices):
        raise ValueError("needs a context string and at least two non-empty choice strings")
    if isinstance(answer, str) and not answer.lstrip("-").isdigit():
        names = labels or list(string.ascii_uppercase[:len(choices)])
        if answer not in names:
            raise ValueError(f"answer {answer!r} is none of the choices' labels {names}")
        answer = names.index(answer)
    try:
        index = int(answer)
    except (TypeError, ValueError):
        raise ValueError(f"answer {answer!r} is not a choice index or label") from None
    if not 0 <= index < len(choices):
        raise ValueError(f"answer {index} is outside the {len(choices)} choices")
    return Example(context, tuple(choices), index)


def read_task(path: str | Path, max_examples: int = 0) -> Task:
    """A task file; its name is the file name without `.jsonl`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"evaluation.tasks: {path} is not a file (JSONL of context, choices, answer)")
    examples, skipped = [], 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                examples.append(parse_example(json.loads(line)))
            except (ValueError, AttributeError) as exc:
                skipped += 1
                if skipped <= 5:
                    log.warning("%s line %d skipped: %s", path, number, exc)
            if max_examples and len(examples) >= max_examples:
                break
    if skipped:
        log.warning("%s: %d line(s) skipped, %d examples kept", path, skipped, len(examples))
    if not examples:
        raise ConfigError(f"evaluation.tasks: {path} holds no usable example ({skipped} line(s) skipped)")
    return Task(path.name.removesuffix(".jsonl"), tuple(examples), skipped)


@dataclass(frozen=True)
class Request:
    example: int
    choice: int
    tokens: tuple[int, ...]         # context then continuation, at most seq_length + 1 tokens
    continuation: int               # how many of the last tokens are the continuation
    n_bytes: int                    # the continuation's length in UTF-8 bytes (acc_norm)


def requests_for(task: Task, encode: Encode, seq_length: int) -> list[Request]:
    out = []
    for e, example in enumerate(task.examples):
        context_ids = encode(example.context)
        for c, choice in enumerate(example.choices):
            continuation = choice if choice[:1].isspace() else " " + choice
            whole = encode(example.context + continuation)
            # the continuation's tokens: whole's past the common prefix with the context's (lm-eval's split)
            common = 0
            while common < min(len(whole), len(context_ids)) and whole[common] == context_ids[common]:
                common += 1
            n = max(len(whole) - common, 1)
            out.append(Request(e, c, tuple(whole[-(seq_length + 1):]), min(n, seq_length),
                               len(continuation.encode("utf-8"))))
    return out


def model_log_probs(model: torch.nn.Module, device: torch.device) -> TokenLogProbs:
    """The whole model in this process (tensor-parallel ranks run it together): a forward pass per micro-batch.
    log p(target) is minus megatron's own per-token cross entropy (vocabulary-parallel under tp: no gather)."""
    @torch.no_grad()
    def score(batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        out = []
        for inputs, targets in batches:
            positions = torch.arange(inputs.shape[1]).expand(inputs.shape[0], -1)
            out.append(-model(inputs.to(device), positions.to(device), None, labels=targets.to(device)).float())
        return out
    return score


def log_likelihoods(score: TokenLogProbs, requests: Sequence[Request], batch_size: int) -> list[float]:
    """Sum of log p(continuation token | everything before it) per request."""
    chunks, batches = [], []
    for start in range(0, len(requests), batch_size):
        chunk = requests[start:start + batch_size]
        width = max(len(r.tokens) for r in chunk) - 1
        inputs = torch.zeros(len(chunk), width, dtype=torch.long)
        targets = torch.zeros(len(chunk), width, dtype=torch.long)
        for i, r in enumerate(chunk):   # right-padded: causal attention keeps padding out of real positions
            inputs[i, :len(r.tokens) - 1] = torch.tensor(r.tokens[:-1])
            targets[i, :len(r.tokens) - 1] = torch.tensor(r.tokens[1:])
        chunks.append(chunk)
        batches.append((inputs, targets))
    out = []
    for chunk, logp in zip(chunks, score(batches)):
        for i, r in enumerate(chunk):
            end = len(r.tokens) - 1
            out.append(logp[i, end - r.continuation:end].sum().item())
    return out


def score_task(score: TokenLogProbs, task: Task, encode: Encode, seq_length: int,
               batch_size: int) -> dict[str, float]:
    requests = requests_for(task, encode, seq_length)
    scores = log_likelihoods(score, requests, batch_size)
    best: dict[int, tuple[float, int]] = {}
    best_norm: dict[int, tuple[float, int]] = {}
    for request, score in zip(requests, scores):
        for table, value in ((best, score), (best_norm, score / max(request.n_bytes, 1))):
            if request.example not in table or value > table[request.example][0]:
                table[request.example] = (value, request.choice)
    n = len(task.examples)
    acc = sum(best[e][1] == ex.answer for e, ex in enumerate(task.examples)) / n
    acc_norm = sum(best_norm[e][1] == ex.answer for e, ex in enumerate(task.examples)) / n
    chance = sum(1 / len(ex.choices) for ex in task.examples) / n
    # the right choices' mean log-likelihood: it moves before the accuracy does
    answer = sum(s for r, s in zip(requests, scores) if r.choice == task.examples[r.example].answer) / n
    return {"acc": acc, "acc_norm": acc_norm, "answer_loglik": answer, "chance": chance, "examples": float(n)}


class Downstream:
    """The tasks of `evaluation.tasks`, read once, scored by `run(model)` every `evaluation.interval` steps."""

    def __init__(self, task_files: Sequence[str], max_examples: int, encode: Encode, seq_length: int,
                 batch_size: int, device: torch.device):
        self.tasks = [read_task(f, max_examples) for f in task_files]
        self.encode, self.seq_length, self.batch_size, self.device = encode, seq_length, batch_size, device

    def run(self, model: torch.nn.Module, score: TokenLogProbs | None = None) -> dict[str, float]:
        """MLflow metrics: downstream.<task>.acc, .acc_norm and .answer_loglik.  `score` runs the model (the
        engine's, under pipeline parallelism); by default one forward pass of `model` per micro-batch."""
        was_training = model.training
        model.eval()
        score = score or model_log_probs(model, self.device)
        try:
            metrics = {}
            for task in self.tasks:
                result = score_task(score, task, self.encode, self.seq_length, self.batch_size)
                for name in ("acc", "acc_norm", "answer_loglik"):
                    metrics[f"downstream.{task.name}.{name}"] = result[name]
                log.info("downstream %s: acc %.3f, acc_norm %.3f over %d examples (chance %.3f)", task.name,
                         result["acc"], result["acc_norm"], int(result["examples"]), result["chance"])
            return metrics
        finally:
            model.train(was_training)


def sentencepiece_encoder(model_file: str) -> Encode:
    """The manifest's tokenizer (the one the shards were written with), without BOS/EOS."""
    import sentencepiece

    path = Path(model_file)
    if not path.is_file():
        raise ConfigError(f"evaluation.tasks needs the manifest's tokenizer to encode the tasks, but {model_file} "
                          "is not a file here")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return lambda text: processor.encode(text)
