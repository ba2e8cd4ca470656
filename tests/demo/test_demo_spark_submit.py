"""The demo's spark-submit carries the settings Spark reads only when it starts the driver's JVM: under spark-submit
the job's session is created after that JVM, so conf/jobs.yaml's Java options would be lost there."""
from pathlib import Path

from conf.paths import load_paths
from demo.config import load_demo_config
from demo.run import spark_submit_command

ROOT = Path(__file__).resolve().parents[2]


def conf_pairs(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, word in enumerate(command) if word == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_the_smoke_profile_gives_the_driver_jvm_its_short_run_options(monkeypatch):
    monkeypatch.setenv("WEBLM_CONF_OVERLAY", str(ROOT / "conf" / "profiles" / "smoke.yaml"))
    command = spark_submit_command(load_demo_config([]), load_paths())
    assert Path(command[0]).name == "spark-submit" and command[1:3] == ["--master", "local[2]"]
    options = conf_pairs(command)
    assert options["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    # the executors' options are not launch-time for the driver: the job's session sets them as any other setting
    assert "spark.executor.extraJavaOptions" not in options


def test_the_default_configuration_leaves_the_jvm_as_spark_starts_it(monkeypatch):
    monkeypatch.delenv("WEBLM_CONF_OVERLAY", raising=False)
    options = conf_pairs(spark_submit_command(load_demo_config([]), load_paths()))
    assert options == {"spark.log.level": "WARN"}
