"""jobs.pipeline: the stages in order on one Spark session, a failed stage stops the run and says
what to run next, `--resume` goes on from it without redoing the stages that finished, a second
run of a finished stage changes nothing, and `--report` ends a run with the per-stage report."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import pipeline_options
from jobs.pipeline import STAGE_NAMES, STAGES, PipelineError, Stage, check_order, main, select_stages

ROOT = Path(__file__).resolve().parents[2]


def test_stages_are_listed_after_what_they_read_and_name_their_jobs():
    assert STAGE_NAMES == ("ingest", "extract", "quality", "dedup", "tokenize", "export", "maintain")
    check_order(STAGES)
    for stage in STAGES:
        assert stage.job_class().name == stage.name
    with pytest.raises(ValueError, match="stage b depends on \\['a'\\]"):
        check_order([Stage("b", "jobs.extract:ExtractJob", ("a",), ""), Stage("a", "jobs.ingest:IngestJob", (), "")])


def test_from_only_and_resume_choose_stages_in_pipeline_order():
    names = lambda stages: [s.name for s in stages]  # noqa: E731
    assert names(select_stages(None, [], False, None, "state.json")) == list(STAGE_NAMES)
    assert names(select_stages("tokenize", [], False, None, "state.json")) == ["tokenize", "export", "maintain"]
    assert names(select_stages(None, ["export", "ingest"], False, None, "state.json")) == ["ingest", "export"]
    state = {"stages": {"ingest": {"status": "ok"}, "extract": {"status": "failed"}, "tokenize": {"status": "ok"}}}
    assert names(select_stages(None, [], True, state, "state.json")) == ["extract", "quality", "dedup", "tokenize",
                                                                       "export", "maintain"]
    done = {"stages": {name: {"status": "ok"} for name in STAGE_NAMES}}
    assert select_stages(None, [], True, done, "state.json") == []
    with pytest.raises(PipelineError, match="nothing to resume: no pipeline state at state.json"):
        select_stages(None, [], True, None, "state.json")


@pytest.fixture(scope="module")
def runs(pipeline_runs):
    return pipeline_runs


def summary_lines(out: str) -> list[list[str]]:
    """`[pipeline] 2/4 extract ok: ...` -> ["2/4", "extract", "ok:"], one per stage that finished."""
    return [line.split()[1:4] for line in out.splitlines() if re.match(r"\[pipeline\] \d+/\d+ ", line)]


def test_a_failed_stage_stops_the_run_and_says_how_to_go_on(runs):
    failed = runs.failed
    assert failed.code == 1
    stages = failed.state["stages"]
    assert [stages[n]["status"] for n in STAGE_NAMES] == ["ok", "ok", "ok", "ok", "failed", "pending", "pending"]
    assert failed.state["status"] == "failed" and failed.state["resume_from"] == "tokenize"
    assert "blocker" in stages["tokenize"]["error"]  # the exception, with the path it could not write
    assert stages["tokenize"]["metrics"] == str(runs.lake / "_metrics" / "tokenize.json")
    assert json.loads(failed.metrics["tokenize"])["status"] == "failed"
    assert stages["ingest"]["output_rows"] > 0 and stages["ingest"]["metrics"].endswith("_metrics/ingest.json")
    assert "export" not in failed.metrics and failed.manifest is None  # the stage after the failure never ran
    assert "stage tokenize failed" in failed.err
    assert "continue from tokenize with these arguments" in failed.err
    assert "python -m jobs.pipeline --resume -o paths.var=" in failed.err
    assert summary_lines(failed.out) == [["1/7", "ingest", "ok:"], ["2/7", "extract", "ok:"], ["3/7", "quality", "ok:"],
                                         ["4/7", "dedup", "ok:"]]


def test_resume_runs_only_the_stages_that_did_not_finish(runs):
    failed, resumed = runs.failed, runs.resumed
    assert resumed.code == 0 and resumed.state["status"] == "ok" and resumed.state["resume_from"] is None
    assert resumed.state["selected"] == ["tokenize", "export", "maintain"]
    assert summary_lines(resumed.out) == [["1/3", "tokenize", "ok:"], ["2/3", "export", "ok:"],
                                          ["3/3", "maintain", "ok:"]]
    for name in ("ingest", "extract", "quality", "dedup"):  # untouched: same record, same metrics file, same table version
        assert resumed.state["stages"][name] == failed.state["stages"][name]
        assert resumed.metrics[name] == failed.metrics[name]
    assert resumed.versions["bronze/pages"] == failed.versions["bronze/pages"]
    for table in ("silver/documents", "silver/signals", "silver/quality", "silver/deduped"):
        assert resumed.versions[table] == failed.versions[table]
    for name in ("tokenize", "export", "maintain"):
        assert resumed.state["stages"][name]["status"] == "ok"
        assert resumed.state["stages"][name]["run_id"] == resumed.state["run_id"] != failed.state["run_id"]
    assert "gold/tokens" in resumed.versions and resumed.manifest["totals"]["documents"] > 0


def test_running_a_finished_stage_again_changes_nothing(runs):
    resumed, again = runs.resumed, runs.again
    assert again.code == 0 and again.state["selected"] == ["export"]
    assert again.state["stages"]["export"]["run_id"] == again.state["run_id"] != resumed.state["run_id"]
    for name in ("ingest", "extract", "quality", "dedup", "tokenize", "maintain"):  # the others keep their record
        assert again.state["stages"][name] == resumed.state["stages"][name]
    assert again.versions == resumed.versions
    assert again.manifest == resumed.manifest  # idempotent: the same shards, the same manifest


def test_the_report_ends_the_run_on_its_session(runs):
    again = runs.again
    report = again.state["report"]
    assert report["status"] == "ok" and report["run_id"] == again.state["run_id"]
    assert report["html"] == str(runs.lake / "_report" / "report.html") and "<img" in Path(report["html"]).read_text()
    stages = {s["stage"]: s for s in json.loads(Path(report["json"]).read_text())["stages"]}
    assert stages["export"]["kept"]["documents"] == again.manifest["totals"]["documents"]
    assert [name for name, s in stages.items() if s["status"] == "ok"] == list(STAGE_NAMES[:-1])  # maintain: no rows


def test_a_failed_report_leaves_the_stages_ok_and_says_how_to_write_it(runs, crawl, tmp_path, monkeypatch, capsys):
    import jobs.report

    var = tmp_path / "var"
    shutil.copytree(runs.lake.parent, var)
    monkeypatch.setattr(jobs.report, "collect", lambda *a: (_ for _ in ()).throw(RuntimeError("injected")))
    assert main(pipeline_options(var, crawl.warc_dir) + ["--only", "export", "--report"]) == 1
    state = json.loads((var / "lake" / "_pipeline" / "state.json").read_text())
    assert state["status"] == "ok" and state["stages"]["export"]["status"] == "ok"
    assert state["report"]["status"] == "failed" and state["report"]["error"] == "RuntimeError: injected"
    err = capsys.readouterr().err
    assert "every stage finished ok, but the per-stage report failed: RuntimeError: injected" in err
    assert f"python -m jobs.report -o paths.var={var}" in err


def test_resume_after_a_finished_run_has_nothing_to_do(runs, capsys):
    var = runs.lake.parent
    assert main(["-o", f"paths.var={var}", "--resume"]) == 0
    assert "nothing to resume: every stage finished ok" in capsys.readouterr().out


def test_a_bad_setting_stops_the_pipeline_before_any_stage(tmp_path, capsys):
    assert main(["-o", f"paths.var={tmp_path}", "-o", "extract.no_such_setting=1"]) == 2
    assert "no_such_setting" in capsys.readouterr().err
    assert not (tmp_path / "lake" / "_pipeline").exists()


def test_no_job_module_shadows_the_standard_library():
    """`spark-submit jobs/<stage>.py` puts jobs/ first on sys.path: a jobs/tokenize.py would hide the standard
    library's tokenize (imported by linecache, hence by logging and tracebacks)."""
    names = {p.stem for p in (ROOT / "jobs").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert not names & set(sys.stdlib_module_names)


def test_the_script_runs_under_spark_submit():
    """`spark-submit jobs/pipeline.py` with jobs/ first on sys.path; the render subcommand needs no session,
    so this stays quick."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("WEBLM_CONF_OVERLAY", None)
    spark_submit = Path(sys.executable).with_name("spark-submit")
    done = subprocess.run([str(spark_submit), str(ROOT / "jobs" / "pipeline.py"), "render", "--target", "emr"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == json.loads((ROOT / "deploy" / "emr" / "steps.json").read_text())
