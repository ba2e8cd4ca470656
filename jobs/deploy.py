"""The scheduler templates in deploy/, rendered from the pipeline's stage list (`jobs.pipeline.STAGES`).

    python -m jobs.pipeline render --all                        # rewrite every file under deploy/
    python -m jobs.pipeline render --target emr [--out FILE] [--set VAR_URI=s3://bucket/weblm ...]

One task per stage on every platform, each running `pipeline.py --only STAGE` (the wheel's console
script on Databricks), so the run state in the lake stays current however the stages are scheduled.
Settings come from conf/pipeline.yaml, the wheel's name and console script from setup.cfg, and the
Delta package from jobs/jars/pom.xml; what only the deployer knows is a `${NAME}` placeholder
(deploy/README.md lists them), filled in with `--set NAME=value` or envsubst.  Committed files are
checked against a fresh render by the tests, so they cannot drift from the stage list.
"""
from __future__ import annotations

import argparse
import configparser
import json
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Sequence

import yaml

from conf import ConfigError
from jobs.pipeline import STAGES, PipelineConfig, Stage, load_pipeline_config

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")
PIPELINE_SCRIPT = "${CODE_URI}/pipeline.py"  # jobs/pipeline.py, uploaded beside install-weblm.sh
REQUIREMENTS = "requirements-cluster.txt"


# -- what the templates are made of ---------------------------------------------------------------------
def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    if not parser.read(ROOT / "setup.cfg"):
        raise FileNotFoundError(f"no setup.cfg at {ROOT}: render the templates from a checkout of weblm")
    return parser


def package_name() -> str:
    return _setup_cfg()["metadata"]["name"]


def console_script() -> str:
    """The console script that runs `jobs.pipeline:main` (setup.cfg [options.entry_points])."""
    scripts = _setup_cfg().get("options.entry_points", "console_scripts", fallback="")
    for line in filter(None, (line.strip() for line in scripts.splitlines())):
        name, _, target = (part.strip() for part in line.partition("="))
        if target == "jobs.pipeline:main":
            return name
    raise ConfigError("setup.cfg has no console script for jobs.pipeline:main under [options.entry_points] "
                      "console_scripts; add `weblm-pipeline = jobs.pipeline:main`")


def cluster_requirements(cfg: PipelineConfig) -> list[str]:
    """setup.cfg's `deploy.extras`, less the packages the platform's Spark provides, sorted by name."""
    extras = _setup_cfg()["options.extras_require"]
    skip = {_project(p) for p in cfg.deploy.platform_provided}
    found: dict[str, str] = {}
    for extra in cfg.deploy.extras:
        if extra not in extras:
            raise ConfigError(f"pipeline.deploy.extras names {extra!r}, which setup.cfg does not define; "
                              f"known: {sorted(extras)}")
        for line in filter(None, (line.split("#")[0].strip() for line in extras[extra].splitlines())):
            if _project(line) not in skip:
                found.setdefault(_project(line), line)
    return [found[name] for name in sorted(found)]


def _project(requirement: str) -> str:
    # by hand, not packaging's Requirement: packaging is no declared dependency (and setup.cfg's names hold no '.')
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def delta_package() -> str:
    """`group:artifact:version` of Delta Lake's Spark jar, as jobs/jars/pom.xml pins it for local runs."""
    pom = ET.parse(ROOT / "jobs" / "jars" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = {el.tag.split("}")[1]: el.text for el in pom.find("m:properties", ns)}
    for dep in pom.iterfind("m:dependencies/m:dependency", ns):
        group, artifact = dep.findtext("m:groupId", namespaces=ns), dep.findtext("m:artifactId", namespaces=ns)
        if group == "io.delta" and artifact.startswith("delta-spark_"):
            version = re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], dep.findtext("m:version", namespaces=ns))
            return f"{group}:{artifact}:{version}"
    raise ConfigError("jobs/jars/pom.xml has no io.delta:delta-spark_* dependency to take the Delta package from")


def stage_args(stage: Stage, cfg: PipelineConfig) -> list[str]:
    """The arguments of one scheduled stage: that stage only, every path under ${VAR_URI}."""
    return ["--only", stage.name, "-o", "paths.var=${VAR_URI}", "-o", f"paths.local={cfg.deploy.local_dir}"]


def quartz(cron: str) -> str:
    """A 5-field cron expression in Quartz's form (seconds first, `?` for the unused day field), for Databricks."""
    fields = cron.split()
    if len(fields) != 5:
        raise ConfigError(f"pipeline.schedule.cron={cron!r} must have 5 fields (minute hour day month weekday)")
    minute, hour, dom, month, dow = fields
    if any(ch.isdigit() for ch in dow):
        raise ConfigError(f"pipeline.schedule.cron={cron!r}: name the weekdays (MON-FRI); cron counts Sunday "
                          "as 0 and Quartz as 1, so numbers would shift a day on Databricks")
    if dow == "*":
        dow = "?"
    elif dom == "*":
        dom = "?"
    else:
        raise ConfigError(f"pipeline.schedule.cron={cron!r} restricts both day of month and weekday, "
                          "which Quartz cannot express; keep one of them *")
    return f"0 {minute} {hour} {dom} {month} {dow}"


# -- the templates ----------------------------------------------------------------------------------------
def render_databricks(cfg: PipelineConfig) -> str:
    """Jobs API 2.1 `jobs/create` payload: one python_wheel_task per stage on one job cluster."""
    libraries = [{"whl": "${WHEEL_URI}"}] + [{"pypi": {"package": r}} for r in cluster_requirements(cfg)]
    tasks = []
    for stage in STAGES:
        task = {"task_key": stage.name, "description": stage.description}
        if stage.depends_on:
            task["depends_on"] = [{"task_key": d} for d in stage.depends_on]
        task.update({
            "job_cluster_key": "weblm",
            "python_wheel_task": {"package_name": package_name(), "entry_point": console_script(),
                                  "parameters": stage_args(stage, cfg)},
            "libraries": libraries,
            "timeout_seconds": cfg.deploy.stage_timeout_s,
            "max_retries": cfg.deploy.retries,
            # a retry waits out the failed run's lease on the lake (jobs/lease.py), else the retry is refused
            "min_retry_interval_millis": int(cfg.lease.ttl_s * 1000),
        })
        tasks.append(task)
    job = {
        "name": cfg.deploy.name,
        "description": "weblm: " + " -> ".join(s.name for s in STAGES) + " (rendered by python -m jobs.pipeline "
                       "render --target databricks; see deploy/README.md)",
        "tags": {"project": "weblm"},
        "max_concurrent_runs": 1,
        "schedule": {"quartz_cron_expression": quartz(cfg.schedule.cron), "timezone_id": cfg.schedule.timezone,
                     "pause_status": "PAUSED" if cfg.schedule.paused else "UNPAUSED"},
        "job_clusters": [{"job_cluster_key": "weblm", "new_cluster": {
            "spark_version": "${DATABRICKS_SPARK_VERSION}", "node_type_id": "${DATABRICKS_NODE_TYPE}",
            "num_workers": cfg.deploy.workers}}],
        "tasks": tasks,
    }
    return json.dumps(job, indent=2) + "\n"


def render_emr(cfg: PipelineConfig) -> str:
    """`aws emr add-steps --steps file://...`: one command-runner spark-submit step per stage, in order."""
    steps = [{
        "Type": "CUSTOM_JAR",
        "Name": f"{cfg.deploy.name}: {stage.name}",
        "ActionOnFailure": "CANCEL_AND_WAIT",
        "Jar": "command-runner.jar",
        "Args": ["spark-submit", "--deploy-mode", "cluster", "--packages", delta_package(),
                 "--conf", "spark.pyspark.python=${EMR_PYTHON}", PIPELINE_SCRIPT, *stage_args(stage, cfg)],
    } for stage in STAGES]
    return json.dumps(steps, indent=2) + "\n"


def render_dataproc(cfg: PipelineConfig) -> str:
    """A Dataproc workflow template: a managed cluster, then one pysparkJob per stage with its prerequisites."""
    jobs = []
    for stage in STAGES:
        job = {"stepId": stage.name}
        if stage.depends_on:
            job["prerequisiteStepIds"] = list(stage.depends_on)
        job["pysparkJob"] = {"mainPythonFileUri": PIPELINE_SCRIPT, "args": stage_args(stage, cfg),
                             "properties": {"spark.jars.packages": delta_package()}}
        job["scheduling"] = {"maxFailuresPerHour": cfg.deploy.retries}
        jobs.append(job)
    machine = {"machineTypeUri": "${DATAPROC_MACHINE_TYPE}"}
    template = {
        "jobs": jobs,
        "placement": {"managedCluster": {"clusterName": cfg.deploy.name, "config": {
            "gceClusterConfig": {"zoneUri": "${GCP_ZONE}", "metadata": {
                "weblm-wheel-uri": "${WHEEL_URI}", "weblm-requirements-uri": f"${{CODE_URI}}/{REQUIREMENTS}"}},
            "initializationActions": [{"executableFile": "${CODE_URI}/install-weblm.sh"}],
            "softwareConfig": {"imageVersion": "${DATAPROC_IMAGE_VERSION}"},
            "masterConfig": {"numInstances": 1, **machine},
            "workerConfig": {"numInstances": cfg.deploy.workers, **machine},
        }}},
        "dagTimeout": f"{min(cfg.deploy.stage_timeout_s * len(STAGES), 24 * 3600)}s",  # Dataproc's limit: 24 h
    }
    header = ("# weblm's Spark pipeline as a Dataproc workflow template, one pysparkJob per stage.\n"
              "# Rendered by `python -m jobs.pipeline render --target dataproc` from jobs/pipeline.py and "
              "conf/pipeline.yaml: change those, not this file.\n"
              "# gcloud dataproc workflow-templates import weblm-pipeline --region=REGION "
              "--source=deploy/dataproc/workflow.yaml  (placeholders: deploy/README.md)\n")
    return header + yaml.safe_dump(template, sort_keys=False, default_flow_style=False, width=200)


AIRFLOW_DAG = '''\
"""weblm's Spark pipeline as an Airflow DAG: one spark-submit task per stage, in jobs/pipeline.py's order.

Rendered by `python -m jobs.pipeline render --target airflow` from jobs/pipeline.py and conf/pipeline.yaml:
change those and render again, not this file.  Each task runs `pipeline.py --only STAGE`, so the run state
in the lake (<lake>/_pipeline/state.json) stays current.  Placeholders (deploy/README.md) are filled in
when the file is rendered with --set, or else expanded by bash from the worker's environment.
"""
from __future__ import annotations

from datetime import timedelta

import pendulum

try:  # Airflow 3: the Task SDK and the standard provider
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.operators.bash import BashOperator

STAGES = [
{stages}
]

with DAG(
    dag_id={dag_id!r},
    description={description!r},
    schedule={cron!r},
    start_date=pendulum.datetime({year}, {month}, {day}, tz={timezone!r}),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation={paused!r},
    default_args={{"retries": {retries!r}, "retry_delay": timedelta(seconds={retry_delay!r}),
                  "execution_timeout": timedelta(seconds={timeout!r})}},
    tags=["weblm"],
    doc_md=__doc__,
) as dag:
    tasks = {{}}
    for stage in STAGES:
        tasks[stage["name"]] = BashOperator(task_id=stage["name"], bash_command=stage["bash_command"])
        for upstream in stage["depends_on"]:
            tasks[upstream] >> tasks[stage["name"]]
'''


def _shell_word(arg: str) -> str:
    """Quoted for bash, except that `${NAME}` placeholders stay expandable."""
    return arg if re.fullmatch(r"[\w@%+=:,./${}-]+", arg) else shlex.quote(arg)


def render_airflow(cfg: PipelineConfig) -> str:
    submit = ["spark-submit", "--master", "${SPARK_MASTER}", "--packages", delta_package(), PIPELINE_SCRIPT]
    stages = ",\n".join("    " + repr({"name": s.name, "depends_on": list(s.depends_on),
                                       "bash_command": " ".join(map(_shell_word, submit + stage_args(s, cfg)))})
                        for s in STAGES)
    year, month, day = (int(part) for part in cfg.schedule.start_date.split("-"))
    return AIRFLOW_DAG.format(
        stages=stages, dag_id=cfg.deploy.name.replace("-", "_"), cron=cfg.schedule.cron, year=year, month=month,
        day=day, timezone=cfg.schedule.timezone, paused=cfg.schedule.paused, retries=cfg.deploy.retries,
        retry_delay=int(cfg.lease.ttl_s), timeout=cfg.deploy.stage_timeout_s,
        description="weblm: " + " -> ".join(s.name for s in STAGES))


def render_requirements(cfg: PipelineConfig) -> str:
    return (f"# What cluster nodes install beside the weblm wheel (deploy/install-weblm.sh, Databricks libraries):\n"
            f"# setup.cfg's extras {', '.join(cfg.deploy.extras)}, less what the platform's Spark provides "
            f"({', '.join(cfg.deploy.platform_provided)}).\n"
            f"# Rendered by `python -m jobs.pipeline render --target requirements`: change setup.cfg or "
            f"conf/pipeline.yaml, not this file.\n" + "".join(r + "\n" for r in cluster_requirements(cfg)))


TARGETS: dict[str, tuple[str, Callable[[PipelineConfig], str]]] = {
    "databricks": ("deploy/databricks/weblm_pipeline.json", render_databricks),
    "emr": ("deploy/emr/steps.json", render_emr),
    "dataproc": ("deploy/dataproc/workflow.yaml", render_dataproc),
    "airflow": ("deploy/airflow/weblm_dag.py", render_airflow),
    "requirements": (f"deploy/{REQUIREMENTS}", render_requirements),
}


def render(target: str, cfg: PipelineConfig | None = None, values: dict[str, str] | None = None) -> str:
    """The template's text, with the given placeholders filled in (the others left as `${NAME}`)."""
    text = TARGETS[target][1](cfg or load_pipeline_config())
    return PLACEHOLDER.sub(lambda m: (values or {}).get(m.group(1), m.group(0)), text)


def placeholders(text: str) -> list[str]:
    return sorted(set(PLACEHOLDER.findall(text)))


def render_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="jobs.pipeline render", description="Write the scheduler templates "
                                     "of deploy/ from the pipeline's stage list and conf/pipeline.yaml.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--target", choices=sorted(TARGETS), help="render one template (to stdout or --out)")
    which.add_argument("--all", action="store_true", help="rewrite every template at its place under deploy/")
    parser.add_argument("--out", help="write the one template here instead of stdout")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="fill in a placeholder, e.g. --set VAR_URI=s3://bucket/weblm")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a conf/pipeline.yaml setting, e.g. -o pipeline.deploy.workers=8")
    args = parser.parse_args(argv)
    if args.all and (args.override or args.set or args.out):
        parser.error("--all rewrites the committed templates, which must stay the render of conf/ as committed "
                     "(the tests compare them); use --target NAME --out FILE with -o/--set for a filled-in copy")
    values = dict(item.partition("=")[::2] for item in args.set)
    try:
        cfg = load_pipeline_config(args.override)
        targets = sorted(TARGETS) if args.all else [args.target]
        for target in targets:
            text = render(target, cfg, values)
            out = ROOT / TARGETS[target][0] if args.all else (Path(args.out) if args.out else None)
            if out is None:
                sys.stdout.write(text)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
            left = placeholders(text)
            print(f"[render] {target} -> {out}" + (f" (to fill in: {', '.join(left)})" if left else ""),
                  file=sys.stderr)
    except ConfigError as exc:
        print(f"[render] {exc}", file=sys.stderr)
        return 2
    return 0
