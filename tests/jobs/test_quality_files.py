"""`python -m jobs.quality_files IN.jsonl OUT_DIR`: the pipeline's quality job over plain {id, text} lines."""
import json
import random

from jobs.quality.heuristics import LineRemoval, c4_remove_lines
from localweb.text import TextGenerator


def prose(language: str, seed: int, paragraphs: int = 4) -> str:
    gen = TextGenerator(language, random.Random(seed))
    return "\n\n".join(gen.paragraph(4, 6) for _ in range(paragraphs))


ROWS = [("en-good", prose("en", 1)),
        ("en-pii", prose("en", 2) + "\n\nWrite to jane.doe@example.org or call +44 20 7946 0958 before 2024-01-15."),
        ("fr-good", prose("fr", 3)),
        ("empty", ""),   # a page extract_files dropped
        ("repeated", "\n".join(["Buy cheap watches online today, best prices in town!"] * 40)),
        ("gibberish", "qzx vbnm kjh ptq wrrr zzt xqq fhhg " * 20)]
REASONS = {"en-good": None, "en-pii": None, "fr-good": None, "empty": "empty", "repeated": "gopher_dup_line_frac",
           "gibberish": "language_uncertain"}


def run(tmp_path, *overrides, keep_lake=False):
    from jobs import quality_files

    corpus, out = tmp_path / "in.jsonl", tmp_path / "out"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in ROWS))
    argv = [str(corpus), str(out), *[x for o in overrides for x in ("-o", o)]] + (["--keep-lake"] if keep_lake else [])
    assert quality_files.main(argv) == 0
    read = lambda name: [json.loads(line) for line in (out / name).read_text().splitlines()]  # noqa: E731
    return read("docs.jsonl"), read("kept.jsonl"), json.loads((out / "metrics.json").read_text())


def test_each_document_gets_its_decision_signals_and_the_kept_text_as_the_pipeline_writes_it(spark, tmp_path):
    docs, kept, metrics = run(tmp_path)
    assert [d["id"] for d in docs] == [i for i, _ in ROWS]   # one line per input document, in input order
    by_id = {d["id"]: d for d in docs}
    assert {i: d["reason"] for i, d in by_id.items()} == REASONS
    assert all(d["keep"] == (d["reason"] is None) for d in docs)
    assert by_id["fr-good"]["language"] == "fr" and by_id["en-good"]["language_score"] > 0.65
    assert 0 < by_id["en-good"]["quality_score"] <= 1
    assert by_id["en-pii"]["signals"]["pii_email"] == 1 and by_id["en-good"]["signals"]["pii_email"] == 0
    assert by_id["repeated"]["signals"]["dup_line_frac"] > 0.3   # the signal behind its reason
    texts = {row["id"]: row["text"] for row in kept}
    assert list(texts) == ["en-good", "en-pii", "fr-good"]
    assert "Write to <EMAIL> or call <PHONE> before 2024-01-15." in texts["en-pii"]
    assert "jane.doe" not in texts["en-pii"]
    fineweb = LineRemoval(enabled=True, filter_no_terminal_punct=False)   # conf's C4 line removal, on for English
    assert texts["en-good"] == c4_remove_lines(dict(ROWS)["en-good"], fineweb)[0]
    assert metrics["status"] == "ok" and metrics["documents"] == 6 and metrics["kept"] == 3
    assert not (tmp_path / "out" / "lake").exists()


def test_a_kept_lake_re_decides_in_flag_mode_without_scoring_again(spark, tmp_path):
    _, _, first = run(tmp_path, keep_lake=True)
    assert first["signals_computed"] == len(ROWS) and (tmp_path / "out" / "lake").is_dir()
    docs, kept, again = run(tmp_path, "quality.mode=flag", keep_lake=True)
    assert again["signals_computed"] == 0   # the stored signals decide: a new mode or threshold scores nothing
    assert all(d["keep"] for d in docs) and len(kept) == len(ROWS)
    assert {d["id"]: d["reason"] for d in docs} == REASONS   # each says which rule it would fail
