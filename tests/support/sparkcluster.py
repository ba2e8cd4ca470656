"""A Spark standalone cluster for the tests: a master and one worker, each its own JVM started with Spark's
`spark-class`, the worker in the environment a cluster node has (the project importable, the platform's cloud
credentials, no weblm setting, no variable of the test's driver), its executors in their own working folder."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.s3server import free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def node_environment(home: Path, pythonpath: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What a node's daemons run with: its Python and Java on PATH, nothing the driver was given."""
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]), "HOME": str(home),
           "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": pythonpath}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    env.update(extra or {})
    return env


class StandaloneCluster:
    """`master` is the URL to give `--master`; `stop()` ends both daemons.  The worker offers `cores` cores and
    `memory_mb` of memory; its executors run under `<folder>/work`."""

    def __init__(self, folder: Path, env: dict[str, str], cores: int = 2, memory_mb: int = 2048) -> None:
        self.folder, self.procs = folder, []
        port = free_port()
        self.master = f"spark://127.0.0.1:{port}"
        spark_class = str(spark_home() / "bin" / "spark-class")
        self._start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())], env,
                    "I have been elected leader")
        self._start("worker", [spark_class, "org.apache.spark.deploy.worker.Worker", self.master,
                               "--cores", str(cores), "--memory", f"{memory_mb}m", "--work-dir",
                               str(folder / "work"), "--webui-port", str(free_port())], env,
                    "Successfully registered with master")

    def _start(self, name: str, args: list[str], env: dict[str, str], ready: str) -> None:
        log = self.folder / f"{name}.log"
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen(args, env=env, cwd=self.folder, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while ready not in log.read_text(errors="replace"):
            if self.procs[-1].poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Spark {name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
