"""deploy/: the scheduler templates are rendered from jobs.pipeline.STAGES, parse as their platforms
read them, run one task per stage in the pipeline's order with its dependencies, and pass arguments
that the pipeline itself accepts.  No cloud: what is checked is what the file says."""
import ast
import configparser
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from conf import ConfigError
from jobs import deploy
from jobs.pipeline import STAGE_NAMES, STAGES, load_pipeline_config, main, parse_args

ROOT = Path(__file__).resolve().parents[2]
DELTA = "io.delta:delta-spark_4.2_2.13:4.4.0"  # what README.md tells cluster users to add


@pytest.fixture(autouse=True)
def default_configuration(monkeypatch):
    """The committed templates are the render of the committed conf/, without anyone's overlay."""
    monkeypatch.delenv("WEBLM_CONF_OVERLAY", raising=False)
    monkeypatch.delenv("WEBLM_CONF_DIR", raising=False)


def committed(target: str) -> str:
    return (ROOT / deploy.TARGETS[target][0]).read_text()


def assert_runs_one_stage(argv: list[str], stage: str) -> None:
    """The arguments a template passes are a valid pipeline run of exactly that stage, over ${VAR_URI}."""
    args = parse_args(argv)
    assert args.only == [stage] and not args.resume and args.start is None
    assert "paths.var=${VAR_URI}" in args.override


@pytest.mark.parametrize("target", sorted(deploy.TARGETS))
def test_committed_template_is_the_rendered_one(target):
    assert committed(target) == deploy.render(target), (
        f"{deploy.TARGETS[target][0]} differs from its render: run `python -m jobs.pipeline render --all`")


def test_databricks_job_has_one_wheel_task_per_stage_with_its_dependencies():
    job = json.loads(committed("databricks"))
    assert [t["task_key"] for t in job["tasks"]] == list(STAGE_NAMES)
    clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
    scripts = configparser.ConfigParser()
    scripts.read(ROOT / "setup.cfg")
    console = dict(line.replace(" ", "").split("=") for line in
                   scripts["options.entry_points"]["console_scripts"].strip().splitlines())
    for task, stage in zip(job["tasks"], STAGES):
        assert [d["task_key"] for d in task.get("depends_on", [])] == list(stage.depends_on)
        wheel = task["python_wheel_task"]
        assert wheel["package_name"] == scripts["metadata"]["name"] == "weblm"
        assert console[wheel["entry_point"]] == "jobs.pipeline:main"
        assert_runs_one_stage(wheel["parameters"], stage.name)
        assert task["job_cluster_key"] in clusters
        assert task["libraries"][0] == {"whl": "${WHEEL_URI}"}
        pypi = [lib["pypi"]["package"] for lib in task["libraries"][1:]]
        assert pypi == deploy.cluster_requirements(load_pipeline_config())
        assert not [p for p in pypi if p.startswith(("pyspark", "delta-spark"))]  # the runtime's own
        assert task["timeout_seconds"] > 0
        # a retry waits until the failed run's lease on the lake has expired, else the lease refuses it
        assert task["min_retry_interval_millis"] >= load_pipeline_config().lease.ttl_s * 1000
    cluster = clusters[job["tasks"][0]["job_cluster_key"]]
    assert cluster["node_type_id"] == "${DATABRICKS_NODE_TYPE}" and cluster["num_workers"] >= 1
    assert job["schedule"] == {"quartz_cron_expression": "0 0 3 * * ?", "timezone_id": "UTC",
                               "pause_status": "PAUSED"}
    assert job["max_concurrent_runs"] == 1  # two runs would race on the run state


def test_emr_steps_submit_the_pipeline_script_once_per_stage_in_order():
    steps = json.loads(committed("emr"))
    assert [s["Name"].rsplit(": ", 1)[1] for s in steps] == list(STAGE_NAMES)  # EMR runs steps in list order
    for step, stage in zip(steps, STAGES):
        assert (step["Type"], step["Jar"], step["ActionOnFailure"]) == (
            "CUSTOM_JAR", "command-runner.jar", "CANCEL_AND_WAIT")  # a failed stage cancels the ones after it
        args = step["Args"]
        assert args[:3] == ["spark-submit", "--deploy-mode", "cluster"]
        assert args[args.index("--packages") + 1] == DELTA
        script = args.index("${CODE_URI}/pipeline.py")
        assert_runs_one_stage(args[script + 1:], stage.name)


def test_dataproc_workflow_has_one_pyspark_job_per_stage_with_prerequisites():
    template = yaml.safe_load(committed("dataproc"))
    jobs = template["jobs"]
    assert [j["stepId"] for j in jobs] == list(STAGE_NAMES)
    for job, stage in zip(jobs, STAGES):
        assert re.fullmatch(r"[A-Za-z0-9][\w-]{1,48}[A-Za-z0-9]", job["stepId"])  # Dataproc's step id rule
        assert job.get("prerequisiteStepIds", []) == list(stage.depends_on)
        spark = job["pysparkJob"]
        assert spark["mainPythonFileUri"] == "${CODE_URI}/pipeline.py"
        assert spark["properties"]["spark.jars.packages"] == DELTA
        assert_runs_one_stage(spark["args"], stage.name)
    cluster = template["placement"]["managedCluster"]["config"]
    assert cluster["initializationActions"] == [{"executableFile": "${CODE_URI}/install-weblm.sh"}]
    script = (ROOT / "deploy" / "install-weblm.sh").read_text()
    for key in cluster["gceClusterConfig"]["metadata"]:  # the init action reads exactly these
        assert f"attributes/{key}" in script


def test_airflow_dag_parses_without_airflow_and_lists_the_pipeline_stages():
    """Airflow itself is not a dependency of weblm, so the DAG file is read, not imported: it must
    compile, import nothing but Airflow, pendulum (Airflow's) and the standard library, and carry
    the stage table the DAG is built from."""
    source = committed("airflow")
    tree = ast.parse(source)
    compile(tree, "weblm_dag.py", "exec")
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "datetime", "pendulum", "airflow"}
    (table,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets] == ["STAGES"]]
    stages = ast.literal_eval(table)
    assert [s["name"] for s in stages] == list(STAGE_NAMES)
    for entry, stage in zip(stages, STAGES):
        assert entry["depends_on"] == list(stage.depends_on)
        words = shlex.split(entry["bash_command"])
        assert words[:3] == ["spark-submit", "--master", "${SPARK_MASTER}"]
        assert words[words.index("--packages") + 1] == DELTA
        assert_runs_one_stage(words[words.index("${CODE_URI}/pipeline.py") + 1:], stage.name)
    (dag,) = [node for node in ast.walk(tree) if isinstance(node, ast.With)]
    settings = {k.arg: k.value for k in dag.items[0].context_expr.keywords}
    cfg = load_pipeline_config()
    assert ast.literal_eval(settings["schedule"]) == cfg.schedule.cron
    assert ast.literal_eval(settings["is_paused_upon_creation"]) is True
    assert ast.literal_eval(settings["catchup"]) is False and ast.literal_eval(settings["max_active_runs"]) == 1
    defaults = {ast.literal_eval(k): v for k, v in zip(settings["default_args"].keys, settings["default_args"].values)}
    assert ast.unparse(defaults["retry_delay"]) == f"timedelta(seconds={int(cfg.lease.ttl_s)})"   # the lease's ttl


def test_every_placeholder_is_documented_in_the_readme():
    readme = (ROOT / "deploy" / "README.md").read_text()
    documented = set(re.findall(r"^\| `\$\{([A-Z0-9_]+)\}` \|", readme, flags=re.M))
    used = {name for target in deploy.TARGETS for name in deploy.placeholders(committed(target))}
    assert used == documented


def test_cluster_requirements_are_the_job_extras_less_the_platforms_spark():
    reqs = committed("requirements").splitlines()
    packages = [r for r in reqs if r and not r.startswith("#")]
    assert "trafilatura==2.3.1" in packages and "gcsfs==2026.10.1" in packages
    assert not [p for p in packages if p.startswith(("pyspark", "delta-spark"))]


def test_render_fills_in_what_it_is_given_and_leaves_the_rest(tmp_path, capsys):
    out = tmp_path / "steps.json"
    assert main(["render", "--target", "emr", "--out", str(out), "--set", "VAR_URI=s3://crawl/weblm"]) == 0
    text = out.read_text()
    assert "paths.var=s3://crawl/weblm" in text and "${VAR_URI}" not in text
    assert deploy.placeholders(text) == ["CODE_URI", "EMR_PYTHON"]
    assert "to fill in: CODE_URI, EMR_PYTHON" in capsys.readouterr().err


def test_render_takes_pipeline_settings_from_the_command_line(capsys):
    assert main(["render", "--target", "databricks", "-o", "pipeline.deploy.workers=8",
                 "-o", "pipeline.schedule.paused=false"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["job_clusters"][0]["new_cluster"]["num_workers"] == 8
    assert job["schedule"]["pause_status"] == "UNPAUSED"


@pytest.mark.parametrize("cron, expected", [("0 3 * * *", "0 0 3 * * ?"),
                                            ("30 2 * * MON-FRI", "0 30 2 ? * MON-FRI"),
                                            ("0 4 1 * *", "0 0 4 1 * ?")])
def test_cron_becomes_quartz_for_databricks(cron, expected):
    assert deploy.quartz(cron) == expected


@pytest.mark.parametrize("cron, says", [("0 3 * * 1-5", "name the weekdays"), ("0 3 1 * MON", "cannot express"),
                                        ("0 3 * *", "5 fields")])
def test_crons_quartz_cannot_mean_the_same_are_refused(cron, says):
    with pytest.raises(ConfigError, match=says):
        deploy.quartz(cron)


def test_install_script_is_valid_bash_and_explains_a_missing_wheel(tmp_path):
    script = ROOT / "deploy" / "install-weblm.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and "pass WHEEL_URI REQUIREMENTS_URI" in done.stderr
