"""The Spark jobs as one pipeline: ingest -> extract -> quality -> dedup -> tokenize -> export -> maintain, in one process,
resumable (maintain compacts and vacuums the lake's Delta tables: jobs/maintain.py).

    python -m jobs.pipeline [--from STAGE | --only STAGE | --resume] [-o KEY=VALUE] [-p KEY=VALUE]
                            [--root DIR] [--lake DIR] [--master URL] [--full] [--report]
    spark-submit jobs/pipeline.py ...                  (the same, under spark-submit)
    weblm-pipeline ...                                 (the same, as the wheel's console script)
    python -m jobs.pipeline render --target databricks|emr|dataproc|airflow|requirements  (or --all)

`STAGES` is the one list of stages and their dependencies: the runner, the scheduler templates in
deploy/ (`jobs/deploy.py` renders them) and the tests read it.  Each stage is a `SparkJob`; the
pipeline calls its `run(argv)` with the common arguments, on one Spark session.  Every stage is
idempotent, so running one again is safe.  The run's state (`<lake>/<state_dir>/state.json`, through
`storage`, so s3:// works) records each stage's status, timing and metrics file; after a failed
stage, `--resume` starts at the first stage that did not finish ok.  `--report` writes the per-stage
report (jobs/report.py) at the end, on the same session, whose Delta snapshots the stages already read;
it is recorded in the state as `report`, and a failed report leaves every stage ok.  One run at a time
writes a lake: a run first takes the lake's lease (`<lake>/<state_dir>/lease.json`, jobs/lease.py), and a second
run is refused, naming the first, before it reads or writes anything.
"""
import argparse
import importlib
import json
import logging
import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence

import storage
from conf import ConfigError, load, split_paths_overrides
from conf.paths import load_paths
from jobs.base import build_session
from jobs.config import load_jobs_config
from jobs.lease import LakeBusy, Lease, LeaseSettings, lake_lease

log = logging.getLogger("weblm.jobs.pipeline")

STATE_FILE = "state.json"
STATE_FORMAT = "weblm-pipeline-state/1"


@dataclass(frozen=True)
class Stage:
    name: str
    job: str                     # "module:Class" of its SparkJob, imported only when the stage runs
    depends_on: tuple[str, ...]  # stages whose output it reads
    description: str             # what goes in and out, for the templates and people

    def job_class(self):
        module, _, cls = self.job.partition(":")
        return getattr(importlib.import_module(module), cls)


STAGES: tuple[Stage, ...] = (
    Stage("ingest", "jobs.ingest:IngestJob", (), "WARC files -> bronze.pages"),
    Stage("extract", "jobs.extract:ExtractJob", ("ingest",), "bronze.pages -> silver.documents"),
    Stage("quality", "jobs.quality.job:QualityJob", ("extract",),
          "silver.documents -> silver.signals (language, heuristics, PII, scorers) -> silver.quality"),
    Stage("dedup", "jobs.dedup.job:DedupJob", ("quality",), "silver.quality -> silver.deduped (URL, exact, near, paragraphs)"),
    Stage("tokenize", "jobs.tokens:TokenizeJob", ("dedup",), "silver.deduped -> BPE tokenizer + gold.tokens"),
    Stage("export", "jobs.export:ExportJob", ("tokenize",), "gold.tokens -> Megatron shards + manifest.json"),
    Stage("maintain", "jobs.maintain:MaintainJob", ("export",),
          "every Delta table: small files compacted, files unused for maintain.retention_hours vacuumed"),
)
STAGE_NAMES = tuple(s.name for s in STAGES)


def check_order(stages: Sequence[Stage]) -> None:
    """Every dependency is a known stage listed before its dependant (so list order is a valid run order)."""
    seen: set[str] = set()
    for stage in stages:
        late = [d for d in stage.depends_on if d not in seen]
        if late:
            raise ValueError(f"stage {stage.name} depends on {late}, which are not listed before it in STAGES")
        seen.add(stage.name)


check_order(STAGES)


# -- configuration (conf/pipeline.yaml) ----------------------------------------------------------------
@dataclass(frozen=True)
class ScheduleSettings:
    cron: str
    timezone: str
    paused: bool
    start_date: str


@dataclass(frozen=True)
class DeploySettings:
    name: str
    workers: int
    local_dir: str
    extras: list[str]
    platform_provided: list[str]
    stage_timeout_s: int
    retries: int


@dataclass(frozen=True)
class PipelineConfig:
    state_dir: str
    lease: LeaseSettings
    schedule: ScheduleSettings
    deploy: DeploySettings


def load_pipeline_config(overrides: Iterable[str] = ()) -> PipelineConfig:
    return load("pipeline", PipelineConfig, overrides)


def split_pipeline_overrides(overrides: Iterable[str]) -> tuple[list[str], list[str]]:
    """`(pipeline_overrides, stage_overrides)`: `pipeline.` settings stay here, the rest go to every stage."""
    mine, theirs = [], []
    for item in overrides:
        (mine if item.startswith("pipeline.") else theirs).append(item)
    return mine, theirs


class PipelineError(RuntimeError):
    """A run that cannot start as asked (nothing to resume, a state file that cannot be read)."""


# -- state ---------------------------------------------------------------------------------------------
def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_state(path: str) -> dict | None:
    if not storage.exists(path):
        return None
    try:
        state = json.loads(storage.read_text(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise PipelineError(f"pipeline state {path} is not valid JSON ({exc}); delete it and run the pipeline "
                            "without --resume (every stage is idempotent)") from exc
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise PipelineError(f"pipeline state {path} is not a {STATE_FORMAT} file; delete it and run the pipeline "
                            "without --resume (every stage is idempotent)")
    return state


def resume_point(state: dict | None) -> str | None:
    """The first stage, in pipeline order, whose last recorded run did not finish ok."""
    stages = (state or {}).get("stages", {})
    return next((name for name in STAGE_NAMES if stages.get(name, {}).get("status") != "ok"), None)


class RunState:
    """The run's record at `<lake>/<state_dir>/state.json`, rewritten whole after every change.

    Stages this run does not select keep the entry of their last run, so the file always says what
    each stage last did, and `resume_from` where `--resume` would start.
    """

    def __init__(self, path: str, previous: dict | None, selected: Sequence[Stage], argv: list[str],
                 run_id: str) -> None:
        self.path = path
        self.clock = 0.0  # monotonic start of the running stage
        self.run_id = run_id
        before = (previous or {}).get("stages", {})
        self.data = {"format": STATE_FORMAT, "run_id": self.run_id, "started": now(), "finished": None,
                     "status": "running", "argv": argv, "selected": [s.name for s in selected],
                     "resume_from": None, "stages": {name: dict(before.get(name) or {"status": "pending"})
                                                     for name in STAGE_NAMES}}
        for stage in selected:
            self.data["stages"][stage.name] = {"status": "pending", "run_id": self.run_id}
        self.save()

    def save(self) -> None:
        self.data["resume_from"] = resume_point(self.data)
        storage.write_text(self.path, json.dumps(self.data, indent=2) + "\n")

    def stage_started(self, stage: Stage) -> None:
        self.data["stages"][stage.name] = {"status": "running", "run_id": self.run_id, "started": now()}
        self.clock = time.monotonic()
        self.save()

    def _ended(self, stage: Stage, status: str, metrics: str | None, **fields) -> dict:
        entry = self.data["stages"][stage.name]
        seconds = round(time.monotonic() - self.clock, 3)
        entry.update(status=status, finished=now(), seconds=seconds, metrics=metrics, **fields)
        self.save()
        return entry

    def stage_ok(self, stage: Stage, metrics_file: str | None, metrics) -> dict:
        return self._ended(stage, "ok", metrics_file, input_rows=metrics.input_rows,
                           output_rows=metrics.output_rows, error=None)

    def stage_failed(self, stage: Stage, metrics_file: str | None, exc: BaseException) -> dict:
        entry = self._ended(stage, "failed", metrics_file, error=f"{type(exc).__name__}: {exc}"[:2000])
        self.finish("failed")
        return entry

    def report_ended(self, started: float, status: str, **fields) -> None:
        self.data["report"] = {"status": status, "run_id": self.run_id, "finished": now(),
                               "seconds": round(time.monotonic() - started, 3), **fields}
        self.save()

    def finish(self, status: str, error: str | None = None) -> None:
        self.data.update(status=status, finished=now())
        if error:
            self.data["error"] = error[:2000]
        self.save()


def select_stages(start: str | None, only: Sequence[str], resume: bool, state: dict | None,
                  state_path: str) -> list[Stage]:
    if resume:
        if state is None:
            raise PipelineError(f"nothing to resume: no pipeline state at {state_path}; run without --resume")
        start = resume_point(state)
        if start is None:
            return []
    if only:
        return [s for s in STAGES if s.name in only]
    names = STAGE_NAMES[STAGE_NAMES.index(start):] if start else STAGE_NAMES
    return [s for s in STAGES if s.name in names]


# -- running -------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jobs.pipeline", description="Run the Spark jobs in order: "
                                     + " -> ".join(STAGE_NAMES) + "; `render` writes the scheduler templates.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--from", dest="start", choices=STAGE_NAMES, help="start at this stage, run the rest")
    which.add_argument("--only", action="append", default=[], choices=STAGE_NAMES,
                       help="run only this stage (repeat for several; they run in pipeline order)")
    which.add_argument("--resume", action="store_true",
                       help="start at the first stage that did not finish ok in the recorded state")
    parser.add_argument("--lake", help="Delta lake root (default: paths.lake)")
    parser.add_argument("--root", help="folder relative paths in conf/paths.yaml are relative to")
    parser.add_argument("--master", help="Spark master for a local run (default: spark.master from conf/jobs.yaml "
                        "unless spark-submit already chose one)")
    parser.add_argument("--full", action="store_true", help="every stage reprocesses all its input, not only "
                        "what is new since its last successful run")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for every stage (e.g. -o extract.min_chars=100, -o paths.var=s3://b/run) "
                             "or for the pipeline (-o pipeline.state_dir=_pipeline)")
    parser.add_argument("-p", "--path", action="append", default=[], metavar="KEY=VALUE",
                        help="same as -o paths.KEY=VALUE")
    parser.add_argument("--report", action="store_true", help="after the stages, write the per-stage report "
                        "(python -m jobs.report) on the same Spark session")
    return parser.parse_args(argv)


def stage_argv(args: argparse.Namespace, stage_overrides: Sequence[str]) -> list[str]:
    """The arguments every stage gets: the common ones of `SparkJob.parse_args`, as given."""
    argv: list[str] = []
    for flag, value in (("--lake", args.lake), ("--root", args.root), ("--master", args.master)):
        if value:
            argv += [flag, value]
    if args.full:
        argv.append("--full")
    for item in stage_overrides:
        argv += ["-o", item]
    for item in args.path:
        argv += ["-p", item]
    return argv


def platform_session(jobs_cfg, paths, master: str | None):
    """`(spark, created)`: a platform that owns the session (Databricks) lends it; otherwise the jobs' own."""
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        from pyspark.sql import SparkSession

        return SparkSession.builder.getOrCreate(), False
    return build_session(jobs_cfg, paths, master, f"{jobs_cfg.spark.app_name_prefix}-pipeline")


def run(argv: Sequence[str] | None = None) -> int:
    """Run the selected stages in order; 0 when all finished ok, 1 when one failed, 2 when none could start."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    pipeline_overrides, stage_overrides = split_pipeline_overrides(args.override)
    try:
        cfg = load_pipeline_config(pipeline_overrides)
        job_overrides, path_overrides = split_paths_overrides(stage_overrides)
        jobs_cfg = load_jobs_config(job_overrides)  # a bad setting fails here, before any stage ran
        path_overrides += list(args.path) + ([f"lake={args.lake}"] if args.lake else [])
        paths = load_paths(path_overrides, root=args.root)
    except ConfigError as exc:
        print(f"[pipeline] {exc}", file=sys.stderr, flush=True)
        return 2
    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]
    lease = lake_lease(paths.lake, run_id, cfg)
    try:
        lease.acquire()   # before the state is read: what it says is then this run's to change
    except LakeBusy as exc:
        print(f"[pipeline] {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        return run_held(args, cfg, jobs_cfg, paths, stage_overrides, pipeline_overrides, lease)
    finally:
        lease.release()


def run_held(args: argparse.Namespace, cfg: PipelineConfig, jobs_cfg, paths, stage_overrides: list[str],
             pipeline_overrides: list[str], lease: Lease) -> int:
    """`run`'s stages, once this run holds the lake's lease."""
    try:
        state_path = storage.join(paths.lake, cfg.state_dir, STATE_FILE)
        previous = read_state(state_path)
        stages = select_stages(args.start, args.only, args.resume, previous, state_path)
    except PipelineError as exc:
        print(f"[pipeline] {exc}", file=sys.stderr, flush=True)
        return 2
    if not stages:
        print(f"[pipeline] nothing to resume: every stage finished ok (state {state_path}); "
              "run without --resume to run them again", flush=True)
        return 0

    common = stage_argv(args, stage_overrides)
    rerun = "python -m jobs.pipeline --resume " + shlex.join(common + [a for o in pipeline_overrides for a in ("-o", o)])
    state = RunState(state_path, previous, stages, common, lease.run_id)
    print(f"[pipeline] run {state.run_id}: {' -> '.join(s.name for s in stages)} (state {state_path})", flush=True)
    try:
        spark, created = platform_session(jobs_cfg, paths, args.master)
    except Exception as exc:
        state.finish("failed", error=f"no Spark session: {type(exc).__name__}: {exc}")
        print(f"[pipeline] could not start Spark, so no stage ran: {exc}\n[pipeline] check Java and the Spark "
              f"settings (conf/jobs.yaml spark.*, --master), then run: {rerun}", file=sys.stderr, flush=True)
        return 1
    try:
        for i, stage in enumerate(stages, 1):
            try:
                lease.check()
            except LakeBusy as exc:   # the state is the other run's now: this one writes nothing more
                print(f"[pipeline] {exc} ({stage.name})", file=sys.stderr, flush=True)
                return 1
            state.stage_started(stage)
            job = None
            try:
                job = stage.job_class()()
                metrics = job.run(common)
            except BaseException as exc:
                entry = state.stage_failed(stage, metrics_path(job), exc)
                log.error("stage %s failed", stage.name, exc_info=exc)
                print(failure_message(stage, stages, entry, state_path, rerun), file=sys.stderr, flush=True)
                if not isinstance(exc, Exception):  # Ctrl-C, SystemExit: recorded, then let it through
                    raise
                return 1
            entry = state.stage_ok(stage, metrics_path(job), metrics)
            print(f"[pipeline] {i}/{len(stages)} {metrics.summary()}; metrics {entry['metrics']}", flush=True)
        reported = write_report(state, common) if args.report else True
    finally:
        if created and jobs_cfg.spark.stop_session:
            spark.stop()
    state.finish("ok")
    print(f"[pipeline] run {state.run_id} ok: {len(stages)} stage(s) in "
          f"{sum(state.data['stages'][s.name]['seconds'] for s in stages):.1f} s", flush=True)
    return 0 if reported else 1


def write_report(state: RunState, common: list[str]) -> bool:
    """The per-stage report after the stages, on their session; a failure is recorded and said, the stages stay ok."""
    from jobs.report import ReportJob

    started = time.monotonic()
    try:
        metrics = ReportJob().run(common)
    except Exception as exc:
        state.report_ended(started, "failed", error=f"{type(exc).__name__}: {exc}"[:2000])
        log.error("the per-stage report failed", exc_info=exc)
        print(f"[pipeline] every stage finished ok, but the per-stage report failed: {type(exc).__name__}: {exc}\n"
              f"[pipeline] write it alone with: python -m jobs.report {shlex.join(common)}", file=sys.stderr,
              flush=True)
        return False
    state.report_ended(started, "ok", html=metrics.extra.get("html"), json=metrics.extra.get("json"))
    return True


def metrics_path(job) -> str | None:
    """Where `SparkJob.write_metrics` put (or would put) the stage's counters; None if it never got its config."""
    if job is None or job.paths is None or job.cfg is None:
        return None
    return storage.join(job.paths.lake, job.cfg.metrics_dir, f"{job.name}.json")


def failure_message(stage: Stage, stages: Sequence[Stage], entry: dict, state_path: str, rerun: str) -> str:
    done = [s.name for s in stages[: stages.index(stage)]]
    left = [s.name for s in stages[stages.index(stage) + 1:]]
    return "\n".join([
        f"[pipeline] stage {stage.name} failed after {entry['seconds']:.1f} s: {entry['error']}",
        f"[pipeline] stopped: {', '.join(done) or 'no stage'} finished ok in this run; "
        f"{', '.join(left) or 'no stage'} did not run. Metrics: {entry['metrics']}; state: {state_path}",
        f"[pipeline] fix the cause above, then continue from {stage.name} with these arguments (changed where "
        f"they caused the failure): {rerun}",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:
        from jobs.deploy import render_main

        return render_main(argv[1:])
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
