"""`python -m jobs.text.extract_files DIR OUT.jsonl`: the extract job's code over files on disk."""
import dataclasses
import gzip
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FOOTER, PAGES, article
from extraction_hooks import CRASH, HANG
from jobs.config import load_jobs_config
from jobs.text.extract_files import extract_files, report
from jobs.text.main_text import Extracted, extract_document, head_title, nesting_depth

CFG = load_jobs_config().extract
ROOT = Path(__file__).resolve().parents[2]
WCXB = ROOT.parent / "shared" / "data" / "extraction" / "wcxb_dev"
CYRILLIC = "Съешь же ещё этих мягких французских булок, да выпей чаю. "


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def echo_url(html, status, content_type, charset, url, cfg):
    """An extractor that returns the URL it was given as the text (loaded by import path, in-process)."""
    return Extracted(None, f"url={url}", "utf-8", "header", 0)


@pytest.fixture
def pages(tmp_path) -> Path:
    root = tmp_path / "pages"
    (root / "sub").mkdir(parents=True)
    (root / "otters.html").write_bytes(PAGES[0].body)
    (root / "sub" / "herons.html.gz").write_bytes(gzip.compress(article("Herons at dawn", "Heron").encode()))
    (root / "sub" / "herons.url").write_text("https://birds.example/herons\n")
    (root / "tiny.html").write_bytes(b"<html><body><p>Hi.</p></body></html>")
    (root / "notes.txt").write_text("not a page")
    return root


def test_one_line_per_page_file_with_the_name_as_id_and_dropped_pages_empty(pages, tmp_path):
    out = tmp_path / "out" / "texts.jsonl"
    stats = extract_files(pages, out, CFG)
    rows = {row["id"]: row for row in read_jsonl(out)}
    assert sorted(rows) == ["herons", "otters", "tiny"]  # .txt ignored; .html and .html.gz, subfolders too
    assert all(set(row) == {"id", "text"} for row in rows.values())
    assert "how the young learn to swim" in rows["otters"]["text"] and FOOTER not in rows["otters"]["text"]
    assert "Heron paragraph 5" in rows["herons"]["text"]
    assert rows["tiny"]["text"] == ""
    assert (stats.files, stats.kept) == (3, 2) and sum(stats.dropped.values()) == 1
    assert 0 < stats.cpu_seconds and stats.docs_per_cpu_s > 0  # the sandbox child's CPU time is counted
    assert not list(out.parent.glob("*.partial"))


def test_text_is_exactly_what_the_spark_job_extracts(pages, tmp_path):
    extract_files(pages, tmp_path / "texts.jsonl", CFG)
    rows = {row["id"]: row["text"] for row in read_jsonl(tmp_path / "texts.jsonl")}
    html = gzip.decompress((pages / "sub" / "herons.html.gz").read_bytes())
    job = extract_document(html, 200, "text/html", None, "https://birds.example/herons", CFG)
    assert rows["herons"] == job.text


def test_the_sibling_url_file_is_the_page_url_else_the_url_the_page_declares(pages, tmp_path):
    canonical = b'<link href="https://birds.example/owls?a=1&amp;b=2" rel="canonical" />'
    og_url = b"<meta property='og:url' content='https://birds.example/og-owls'>"
    (pages / "owls.html").write_bytes(b"<html><head>" + og_url + canonical + b"</head><body>Owls</body></html>")
    (pages / "og.html").write_bytes(b"<html><head>" + og_url + b'<link rel="canonical" href="/owls"></head></html>')
    (pages / "sub" / "herons.html.gz").write_bytes(gzip.compress(b"<head>" + canonical + b"</head>"))
    (pages / "stylesheet.html").write_bytes(b'<link rel="canonical-ish" href="https://birds.example/no">')
    cfg = dataclasses.replace(CFG, sandbox=False)
    extract_files(pages, tmp_path / "urls.jsonl", cfg, extractor="test_extract_files:echo_url")
    rows = {row["id"]: row["text"] for row in read_jsonl(tmp_path / "urls.jsonl")}
    assert rows == {"herons": "url=https://birds.example/herons",   # the .url file wins over the page's own
                    "owls": "url=https://birds.example/owls?a=1&b=2",   # canonical first, entities decoded
                    "og": "url=https://birds.example/og-owls",   # a relative canonical does not count
                    "stylesheet": "url=None", "otters": "url=None", "tiny": "url=None"}


def test_bad_input_gives_a_line_and_a_count_never_a_crash(tmp_path):
    root = tmp_path / "bad"
    root.mkdir()
    random.seed(11)
    (root / "random.html").write_bytes(bytes(random.getrandbits(8) for _ in range(20_000)))
    cp1251 = ("<html><head><meta charset='utf-8'><title>Новости</title></head><body><article><p>"
              + CYRILLIC * 40 + "</p></article></body></html>")
    (root / "cp1251.html").write_bytes(cp1251.encode("cp1251"))  # declares UTF-8, is windows-1251
    deep = "<html><body>" + "<div>" * 100_000 + "<p>" + "deep text " * 50 + "</p>" + "</div>" * 100_000 + "</body></html>"
    (root / "deep.html").write_text(deep)
    (root / "huge.html.gz").write_bytes(gzip.compress(b"<p>" + b"x" * (CFG.max_html_bytes + 10) + b"</p>"))
    (root / "broken.html.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    (root / "empty.html").write_bytes(b"")
    (root / "moved.html").symlink_to(tmp_path / "gone.html")   # a link whose page was moved away
    (root / "folder.html").mkdir()                               # not a page, not counted
    stats = extract_files(root, tmp_path / "bad.jsonl", CFG)
    rows = {row["id"]: row["text"] for row in read_jsonl(tmp_path / "bad.jsonl")}
    assert len(rows) == stats.files == 7
    assert CYRILLIC.strip() in rows["cp1251"] and "\ufffd" not in rows["cp1251"]  # detected, not replaced
    assert stats.decoded_by["detected"] == 1
    assert stats.dropped == {"binary_content": 1, "too_deep": 1, "too_large": 1, "unreadable_file": 2, "empty_page": 1}
    assert all(rows[name] == "" for name in ("random", "deep", "huge", "broken", "empty", "moved"))


def test_a_gzip_file_cut_short_gives_the_text_of_its_complete_part(tmp_path, caplog):
    root = tmp_path / "cut"
    root.mkdir()
    paragraphs = [f"Paragraph {i}: the heron waits in the shallows, still as a post, for the fish to come. " * 3
                  for i in range(400)]
    html = ("<html><body><article>" + "".join(f"<p>{p}</p>" for p in paragraphs) + "</article></body></html>").encode()
    whole = gzip.compress(html)
    (root / "whole.html.gz").write_bytes(whole)
    (root / "cut.html.gz").write_bytes(whole[:len(whole) // 2])
    (root / "stub.html.gz").write_bytes(whole[:12])              # the header and no page
    (root / "two.html.gz").write_bytes(gzip.compress(html[:5000]) + gzip.compress(html[5000:]) + b"\0" * 512)
    with caplog.at_level("WARNING"):
        stats = extract_files(root, tmp_path / "cut.jsonl", dataclasses.replace(CFG, min_chars=1))
    assert "gzip files cut short, read as far as they inflate: 1" in report(stats, tmp_path / "cut.jsonl")
    rows = {row["id"]: row["text"] for row in read_jsonl(tmp_path / "cut.jsonl")}
    assert stats.truncated_files == 1 and stats.dropped == {"unreadable_file": 1}   # the stub: nothing to read
    assert rows["two"] == rows["whole"]     # members of one gzip file, then zero padding: the whole page
    kept = rows["cut"]
    assert "Paragraph 0:" in kept and "Paragraph 399:" not in kept and kept in rows["whole"]
    assert len(kept) > len(rows["whole"]) // 4
    assert rows["stub"] == ""
    assert "cut.html.gz: the gzip stream is cut short" in caplog.text
    assert "stub.html.gz: unreadable (EOFError" in caplog.text


def test_the_command_reports_its_counts_on_stderr(pages, tmp_path):
    (pages / "random.html").write_bytes(bytes(range(256)) * 40)
    out, stats = tmp_path / "cli.jsonl", tmp_path / "stats.json"
    run = subprocess.run([sys.executable, "-m", "jobs.text.extract_files", str(pages), str(out), "--stats", str(stats),
                          "-o", "extract.min_chars=1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "4 files" in run.stderr and "kept 3, dropped 1" in run.stderr and "binary_content 1" in run.stderr
    assert {row["id"] for row in read_jsonl(out)} == {"otters", "herons", "tiny", "random"}
    assert json.loads(stats.read_text())["dropped"] == {"binary_content": 1}  # min_chars=1 keeps "tiny"


def test_a_folder_that_is_not_there_is_a_usage_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "jobs.text.extract_files", str(tmp_path / "nope"), str(tmp_path / "o.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "is not a folder" in run.stderr


def test_workers_write_the_same_lines_in_the_same_order_and_a_hung_page_costs_only_itself(pages, tmp_path):
    for i in range(30):
        (pages / f"story{i:02d}.html").write_bytes(article(f"Heron story {i}", f"Heron{i}").encode())
    (pages / "hang.html").write_bytes(HANG)     # never returns: its worker's child is killed and restarted
    (pages / "crash.html").write_bytes(CRASH)   # kills its child, as a segfault in lxml would
    cfg = dataclasses.replace(CFG, timeout_s=3)
    one = extract_files(pages, tmp_path / "one.jsonl", cfg, extractor="extraction_hooks:extract_or_misbehave")
    three = extract_files(pages, tmp_path / "three.jsonl", cfg, extractor="extraction_hooks:extract_or_misbehave",
                          workers=3)
    assert (tmp_path / "three.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    ids = [row["id"] for row in read_jsonl(tmp_path / "three.jsonl")]
    assert len(ids) == 35 and ids.index("story00") < ids.index("story29")
    assert (three.files, three.kept, three.dropped, three.decoded_by) == (one.files, one.kept, one.dropped,
                                                                          one.decoded_by)
    assert three.dropped == {"extract_timeout": 1, "extractor_crashed": 1, "too_short": 1}   # tiny: too short
    assert three.kept == 32 and three.cpu_seconds > 0


def test_workers_whose_sandbox_cannot_start_fail_the_run_and_leave_no_output(pages, tmp_path):
    out = tmp_path / "none.jsonl"
    with pytest.raises(RuntimeError, match="did not start"):
        extract_files(pages, out, CFG, extractor="no_such_module:extract", workers=2)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_the_command_takes_workers_and_needs_the_sandbox_for_them(pages, tmp_path):
    extract_files(pages, tmp_path / "serial.jsonl", CFG)
    command = [sys.executable, "-m", "jobs.text.extract_files", str(pages), str(tmp_path / "two.jsonl"), "--workers"]
    run = subprocess.run(command + ["2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "3 files" in run.stderr and (tmp_path / "two.jsonl").read_bytes() == (tmp_path / "serial.jsonl").read_bytes()
    run = subprocess.run(command + ["2", "-o", "extract.sandbox=false"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "--workers 2 runs one sandbox process per worker" in run.stderr
    assert not (tmp_path / "two.jsonl.partial").exists()


def test_nesting_depth_counts_elements_not_void_or_self_closed_tags():
    assert nesting_depth(b"<html><body><div><p>a<br><img src=x><svg><path d='1'/></svg></p></div></body></html>") == 5
    assert nesting_depth(b"<div>" * 3000 + b"</div>" * 3000, at_least=2000) == 3000
    assert nesting_depth(b"<div>" * 10, at_least=2000) == 10  # few tags: answered from the count


def test_the_title_comes_from_the_page_head():
    assert head_title("<html><head><title>\n Otters &amp; herons </title></head></html>") == "Otters & herons"
    assert head_title("<html><body>no title</body></html>") is None
    cfg = dataclasses.replace(CFG, extractor="trafilatura")
    assert extract_document(PAGES[0].body, 200, "text/html", "utf-8", PAGES[0].url, cfg).title == "Otters of the river"


def test_an_unknown_extractor_setting_fails_with_the_choices():
    with pytest.raises(ValueError, match="rs_trafilatura, trafilatura"):
        extract_document(PAGES[0].body, 200, "text/html", None, None, dataclasses.replace(CFG, extractor="magic"))


def test_real_articles_come_out_close_to_their_ground_truth(tmp_path):
    if not WCXB.exists():
        pytest.skip(f"shared data {WCXB} is absent")
    spec = importlib.util.spec_from_file_location("wcxb_evaluate", WCXB / "evaluate.py")
    scorer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scorer)
    truth = {}
    for path in sorted((WCXB / "dev" / "ground-truth").glob("*.json")):
        data = json.loads(path.read_text())
        if scorer.get_page_type(data) == "article":
            truth[path.stem] = data
        if len(truth) == 12:
            break
    root = tmp_path / "wcxb"
    root.mkdir()
    for page_id, data in truth.items():
        (root / f"{page_id}.html.gz").symlink_to(WCXB / "dev" / "html" / f"{page_id}.html.gz")
        (root / f"{page_id}.url").write_text(data["url"])
    extract_files(root, tmp_path / "wcxb.jsonl", CFG)
    f1 = [scorer.word_f1(row["text"], truth[row["id"]]["ground_truth"]["main_content"])[2]
          for row in read_jsonl(tmp_path / "wcxb.jsonl")]
    assert len(f1) == 12 and sum(f1) / len(f1) >= 0.85
