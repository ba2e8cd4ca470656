"""Downstream multiple-choice evaluation (trainer/downstream.py): task files in the common formats, bad lines
counted, lm-eval's log-likelihood scoring, and a run whose model learned the facts scoring above chance."""
import json
import random

import mlflow
import pytest
import sentencepiece
from mlflow.tracking import MlflowClient

from conf import ConfigError
from conftest import tiny_config, tmp_paths
from shardkit import EOD, build_shards
from trainer.downstream import parse_example, read_task, requests_for, sentencepiece_encoder
from trainer.manifest import file_sha256
from trainer.train import train

ANIMALS = ["otter", "heron", "beaver", "badger", "falcon", "salmon", "marten", "vole"]
FOODS = ["fish", "frogs", "bark", "worms", "pigeons", "shrimp", "berries", "seeds"]


def test_the_common_task_formats_parse():
    hellaswag = {"ctx": "A man is sitting on a roof. he", "endings": ["starts pulling up roofing.", "is ripping",
                                                                     "holds a rope", "stands up"], "label": "3"}
    assert parse_example(hellaswag).answer == 3 and len(parse_example(hellaswag).choices) == 4
    arc = {"question": {"stem": "Which is a mammal?", "choices": [{"text": "otter", "label": "A"},
                                                                 {"text": "trout", "label": "B"}]},
           "answerKey": "A"}
    assert parse_example(arc) == parse_example({"question": "Which is a mammal?",
                                                "choices": {"text": ["otter", "trout"], "label": ["A", "B"]},
                                                "answerKey": "A"})
    assert parse_example({"context": "2 + 2 =", "choices": ["3", "4"], "answer": "B"}).answer == 1
    for bad, message in [({"context": "x", "choices": ["a"], "answer": 0}, "at least two"),
                         ({"context": "x", "choices": ["a", "b"], "answer": 2}, "outside the 2 choices"),
                         ({"context": "x", "choices": ["a", "b"], "answer": "C"}, "none of the choices' labels"),
                         ({"choices": ["a", "b"], "answer": 0}, "needs a context")]:
        with pytest.raises(ValueError, match=message):
            parse_example(bad)


def test_bad_lines_are_counted_and_an_empty_task_stops_the_run(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps({"context": "a", "choices": ["b", "c"], "answer": 0}) + "\n{not json\n\n"
                    + json.dumps({"context": "a", "choices": ["b"], "answer": 0}) + "\n")
    task = read_task(path)
    assert task.name == "facts" and len(task.examples) == 1 and task.skipped == 2
    (tmp_path / "none.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="holds no usable example"):
        read_task(tmp_path / "none.jsonl")
    with pytest.raises(ConfigError, match="is not a file"):
        read_task(tmp_path / "missing.jsonl")


def _fact(animal: int) -> str:
    return f"the {ANIMALS[animal]} eats {FOODS[animal]} every day."


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    """A SentencePiece model and shards of documents stating which animal eats what, and a task asking it."""
    root = tmp_path_factory.mktemp("facts")
    rng = random.Random(0)
    docs = [" ".join(_fact(rng.randrange(len(ANIMALS))) for _ in range(12)) for _ in range(160)]
    (root / "corpus.txt").write_text("\n".join(docs))
    sentencepiece.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(root / "spm"),
                                             vocab_size=120, model_type="bpe", pad_id=0, unk_id=1, eos_id=EOD,
                                             bos_id=-1, hard_vocab_limit=False, minloglevel=2)
    model = root / "spm.model"
    encode = sentencepiece_encoder(str(model))
    manifest = build_shards(root / "shards", tokenizer=(str(model), file_sha256(model)),
                            documents=[encode(d) for d in docs])
    task = root / "what_animals_eat.jsonl"
    with open(task, "w") as out:
        for a, animal in enumerate(ANIMALS):
            wrong = [FOODS[(a + k) % len(FOODS)] for k in (1, 3, 5)]
            choices = [FOODS[a], *wrong]
            rng.shuffle(choices)
            out.write(json.dumps({"context": f"the {animal} eats", "choices": [f"{c} every day." for c in choices],
                                  "answer": choices.index(FOODS[a])}) + "\n")
    return {"manifest": manifest, "task": task, "encode": encode}


def test_the_continuation_is_scored_on_its_own_tokens(facts):
    task = read_task(facts["task"])
    requests = requests_for(task, facts["encode"], seq_length=64)
    assert len(requests) == 4 * len(ANIMALS)
    for request in requests:
        example = task.examples[request.example]
        whole = facts["encode"](example.context + " " + example.choices[request.choice])
        assert list(request.tokens) == whole and 0 < request.continuation < len(whole)
        assert facts["encode"](example.context) == whole[:len(whole) - request.continuation]
    short = requests_for(task, facts["encode"], seq_length=4)
    assert all(len(r.tokens) <= 5 for r in short)   # the context loses tokens from its left


def test_a_run_scores_its_tasks_and_logs_them(facts, tmp_path):
    cfg = tiny_config("schedule.steps=100", "schedule.eval_interval=0", "evaluation.interval=50",
                      f"evaluation.tasks=[{facts['task']}]")
    paths = tmp_paths(tmp_path / "run")
    before = tiny_config("schedule.steps=1", "optim.warmup_steps=0", "schedule.eval_interval=0",
                         "evaluation.interval=1", f"evaluation.tasks=[{facts['task']}]")
    untrained = train(before, tmp_paths(tmp_path / "untrained"), facts["manifest"])["downstream"]
    result = train(cfg, paths, facts["manifest"])
    acc = result["downstream"]["downstream.what_animals_eat.acc"]
    assert acc >= 0.875 > 0.5 > untrained["downstream.what_animals_eat.acc"]   # chance is 0.25
    mlflow.set_tracking_uri(paths.mlflow_tracking_uri)
    client = MlflowClient()
    history = client.get_metric_history(result["run_id"], "downstream.what_animals_eat.acc")
    assert [m.step for m in history] == [49, 99] and history[-1].value == acc
