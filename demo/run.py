"""`make demo`: start the local web, crawl it, run the Spark jobs, train, and summarise.

Each stage runs as its users run it, in its own process: `python -m spider.crawl`,
`spark-submit jobs/<stage>.py`, `python -m trainer.train`.  The stages share nothing but
the files named in SEAMS.md, which is what makes the demo a test of the seams.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import storage
from conf.paths import Paths, is_uri, load_paths
from demo.config import DemoConfig, load_demo_config
from demo.summary import build_summary, render_summary
from jobs.config import load_jobs_config

ROOT = Path(__file__).resolve().parent.parent
# Spark's console progress bars and JVM warnings bury the pipeline's own progress lines.
NOISE = re.compile(r"^\s*\[Stage \d|^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN) |^WARNING: |"
                   r"Using Spark's default log4j|setLogLevel|UserWarning: (Transformer Engine|Apex)|warnings.warn\(")


class StageFailed(RuntimeError):
    pass


@dataclass
class StageRun:
    name: str
    seconds: float
    log: str


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--override", action="append", default=[],
                        help="demo setting key=value (other sections: use $WEBLM_CONF_OVERLAY)")
    args = parser.parse_args(argv)
    cfg = load_demo_config(args.override)
    paths = load_paths()
    try:
        summary = run_demo(cfg, paths)
    except StageFailed as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 1
    print(render_summary(summary))
    return 0


def run_demo(cfg: DemoConfig, paths: Paths) -> dict:
    started = time.time()
    if cfg.fresh:
        wipe_previous_run(paths)
    logs = Path(paths.local) / "demo" / "logs"  # logs stay on this machine, wherever paths.var points
    logs.mkdir(parents=True, exist_ok=True)
    env = stage_env()
    replays = [str((ROOT / p).resolve()) for p in cfg.replay_warcs if (ROOT / p).exists()]
    missing = [p for p in cfg.replay_warcs if not (ROOT / p).exists()]
    for path in missing:
        print(f"[demo] replay WARC {path} not found: the local web serves generated sites only")

    stages: list[StageRun] = []
    render = render_js(cfg)
    web = start_local_web(replays, env, logs / "localweb.log", cfg.localweb_start_timeout_s, js_hosts=render)
    try:
        seeds = paths.seeds
        storage.write_text(seeds, "\n".join(web["seeds"]) + "\n")
        print(f"[demo] local web at {web['proxy']} with {len(web['seeds'])} seeds -> {seeds}")
        crawl = [sys.executable, "-m", "spider.crawl", "--seeds", seeds, "-o", f"proxy={web['proxy']}"]
        crawl += [arg for override in cfg.crawl_overrides for arg in ("-o", override)]
        stages.append(run_stage("crawl", crawl + (["-o", "render.enabled=true"] if render else []), env, logs, cfg))
    finally:
        stop(web["process"])

    spark_submit = spark_submit_command(cfg, paths)
    # the Spark stages as users schedule them: a resumable pipeline run (jobs/pipeline.py), one session; with the
    # quality models, in two runs around their training, which reads the crawl's text (silver.documents) with
    # delta-rs: the perplexity buckets' cut-offs come from its documents in the model's language, the classifier's
    # negatives are its documents; the second run scores with the models and goes on
    pipeline = spark_submit + [str(ROOT / "jobs" / "pipeline.py"), "-o", "quality.scorers.toxicity.enabled=true"]
    if quality_models(cfg):
        stages.append(run_stage("jobs.silver", pipeline + ["--only", "ingest", "--only", "extract"], env, logs, cfg))
        stages.append(run_stage("models.kenlm", [
            sys.executable, "-m", "jobs.quality.train_kenlm", "--cutoff-corpus", "table:silver.documents",
            "-o", f"quality.scorers.perplexity.train.vocab_size={cfg.kenlm_vocab_size}"], env, logs, cfg))
        stages.append(run_stage("models.quality_classifier", [sys.executable, "-m", "jobs.quality.train_classifier"],
                                env, logs, cfg))
        pipeline += ["--from", "quality", "-o", "quality.scorers.perplexity.enabled=true",
                     "-o", "quality.scorers.quality_classifier.enabled=true"]
    # ... and ends with the per-stage report (funnel, drop reasons, retention, signal histograms) on its session:
    # <lake>/_report/report.html
    stages.append(run_stage("jobs", pipeline + ["--report"], env, logs, cfg))
    stages += pipeline_stage_times(paths)
    stages.append(run_stage("train", [sys.executable, "-m", "trainer.train"], env, logs, cfg))
    checkpoint = json.loads(storage.read_text(storage.join(paths.train_dir, "result.json")))["checkpoint"]
    seen = str(Path(paths.local) / "demo" / "documents_seen.jsonl")
    stages.append(run_stage("provenance", [sys.executable, "-m", "trainer.provenance", checkpoint, "--out", seen],
                            env, logs, cfg))

    summary = build_summary(paths, {s.name: round(s.seconds, 1) for s in stages}, time.time() - started, seen)
    text = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    out = storage.join(paths.var, "demo", "summary.json")
    storage.write_text(out, text)
    if is_uri(out):  # a local copy beside the logs, for a person to open
        storage.write_text(str(Path(paths.local) / "demo" / "summary.json"), text)
    summary["summary_path"] = out
    return summary


def spark_submit_command(cfg: DemoConfig, paths: Paths) -> list[str]:
    """spark-submit with the master and Spark settings of conf/jobs.yaml, the one place they live.  Those Spark
    reads only when it starts the driver's JVM (its Java options, class and library paths) go on the command line:
    the job's own session comes too late for them."""
    jobs = load_jobs_config()
    command = [str(Path(sys.executable).with_name("spark-submit")), "--master", jobs.spark.master,
               "--driver-memory", cfg.spark_driver_memory, "--conf", "spark.log.level=WARN"]
    for key in ("spark.driver.extraJavaOptions", "spark.driver.extraClassPath", "spark.driver.extraLibraryPath"):
        if key in jobs.spark.conf:
            command += ["--conf", f"{key}={jobs.spark.conf[key]}"]
    jars = sorted(Path(paths.spark_jars_dir).glob("*.jar")) if Path(paths.spark_jars_dir).is_dir() else []
    if jars:
        command += ["--jars", ",".join(map(str, jars))]
    return command


def render_js(cfg: DemoConfig) -> bool:
    """Whether the demo serves the JavaScript hosts and renders them (`demo.render_js`)."""
    from spider.config import load_crawl_config

    executable = load_crawl_config().render.executable
    found = Path(executable).is_file() and os.access(executable, os.X_OK)
    if cfg.render_js == "always" and not found:
        raise StageFailed(f"demo.render_js is always but {executable} is not there: install Debian's chromium "
                          "(`sudo make system-deps`) or set demo.render_js=auto")
    if cfg.render_js == "auto" and not found:
        print(f"[demo] {executable} not found: crawling plain HTML only (the JavaScript hosts need Chromium: "
              "`sudo make system-deps`)")
    return cfg.render_js != "never" and found


def quality_models(cfg: DemoConfig) -> bool:
    """Whether the demo trains and uses the perplexity and quality-classifier models (`demo.quality_models`)."""
    if not cfg.quality_models:
        return False
    scorers = load_jobs_config().quality.scorers
    corpora = [scorers["perplexity"]["train"]["corpus"], scorers["quality_classifier"]["train"]["positives"]]
    missing = [c for c in corpora if not (ROOT / c).exists()]
    if missing:
        print(f"[demo] reference corpus {missing[0]} not found: the quality stage runs without the perplexity and "
              "quality-classifier models (point quality.scorers.*.train at your own reference text)")
    return not missing


def pipeline_stage_times(paths: Paths) -> list[StageRun]:
    """Each Spark stage's own time, and the report's, from the pipeline's run state (`<lake>/_pipeline/state.json`)."""
    from jobs.pipeline import STATE_FILE, load_pipeline_config

    state = json.loads(storage.read_text(storage.join(paths.lake, load_pipeline_config().state_dir, STATE_FILE)))
    report = state.get("report") or {}
    return [StageRun(f"jobs.{name}", entry.get("seconds") or 0.0, entry.get("metrics") or "")
            for name, entry in state["stages"].items()] + [StageRun("report", report.get("seconds") or 0.0,
                                                                    report.get("html") or "")]


def wipe_previous_run(paths: Paths) -> None:
    """Remove the previous run's outputs, but only what lives under `paths.var` or `paths.local`."""
    roots = [r.rstrip("/") + "/" for r in (paths.var, paths.local)]
    for name in ("seeds", "warc_dir", "warc_buffer", "crawl_stats", "lake", "tokenizer_dir", "shards_dir",
                 "train_dir", "cache_dir", "train_staging", "mlflow_artifacts"):
        target = getattr(paths, name)
        if any(target.startswith(root) for root in roots):
            storage.remove(target, recursive=True)
    db = paths.mlflow_tracking_uri.removeprefix("sqlite:///")
    if paths.mlflow_tracking_uri.startswith("sqlite:///") and db.startswith(roots[1]):
        Path(db).unlink(missing_ok=True)
    storage.remove(str(Path(paths.local) / "demo"), recursive=True)
    storage.remove(str(Path(paths.local) / "frontier"), recursive=True)  # the embedded crawl frontier: a new crawl


def stage_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # spark-submit finds Spark and its Python through PATH: make both this interpreter's (the venv's).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start_local_web(replays: list[str], env: dict, log: Path, timeout_s: int, js_hosts: bool = False) -> dict:
    cmd = [sys.executable, "-m", "localweb", "serve"] + (["-o", "js_hosts=true"] if js_hosts else [])
    for path in replays:
        cmd += ["--replay", path]
    errors = log.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
    deadline = time.time() + timeout_s
    line = ""
    while time.time() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        if line.strip().startswith("{"):
            ready = json.loads(line)
            ready["process"] = proc
            return ready
    stop(proc)
    raise StageFailed(f"the local web did not start within {timeout_s} s (last output {line!r}); see {log}")


def run_stage(name: str, cmd: list[str], env: dict, logs: Path, cfg: DemoConfig) -> StageRun:
    log_path = logs / f"{name}.log"
    print(f"[demo] {name}: {' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''}  (log: {log_path})", flush=True)
    started = time.time()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
        watchdog = threading.Timer(cfg.stage_timeout_s, stop, [proc])
        watchdog.start()
        try:
            for line in proc.stdout:
                log.write(line)
                if not NOISE.search(line):
                    print(f"  [{name}] {line.rstrip()}", flush=True)
            proc.wait()
        except KeyboardInterrupt:
            stop(proc)
            raise
        finally:
            watchdog.cancel()
    seconds = time.time() - started
    if seconds >= cfg.stage_timeout_s:
        raise StageFailed(f"stage {name} ran past {cfg.stage_timeout_s} s and was stopped; see {log_path}")
    if proc.returncode != 0:
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise StageFailed(f"stage {name} exited with {proc.returncode} after {seconds:.0f} s; "
                          f"last lines of {log_path}:\n{tail}")
    print(f"[demo] {name} done in {seconds:.1f} s", flush=True)
    return StageRun(name, seconds, str(log_path))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM) if os.getpgid(proc.pid) == proc.pid else proc.terminate()
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
