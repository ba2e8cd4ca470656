"""The SLURM and Kubernetes launch files render, parse, and agree with the layout they launch."""
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from trainer.launch import main

ROOT = Path(__file__).resolve().parents[2]
BATCH = ("-o", "batch.micro_batch_size=1", "-o", "batch.global_batch_size=64")


def render(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_slurm_script_is_valid_bash_with_the_layout(capsys, tmp_path):
    layout = ("slurm", "--nodes", "2", "--gpus-per-node", "8", "-o", "parallel.tp=8", "-o", "parallel.dp=2",
              "-o", "paths.train_dir=s3://bucket/run")
    # sharded checkpoints in a bucket, ranks on two machines: each machine stages and uploads its own shards
    code, out, _ = render(capsys, *layout)
    assert code == 0
    script = tmp_path / "train.sbatch"
    script.write_text(out)
    subprocess.run(["bash", "-n", str(script)], check=True)          # syntax
    directives = dict(line[len("#SBATCH --"):].split("=", 1) for line in out.splitlines()
                      if line.startswith("#SBATCH --") and "=" in line)
    assert directives["nodes"] == "2" and directives["gpus-per-node"] == "8" and directives["ntasks-per-node"] == "1"
    launch = out[out.index("srun"):].replace("\\\n", " ")
    words = shlex.split(launch)
    assert "--nnodes=2" in words and "--nproc-per-node=8" in words and "--max-restarts=3" in words
    assert words[words.index("-m") + 1] == "trainer.train" and "--resume" in words
    assert "parallel.tp=8" in words and "paths.train_dir=s3://bucket/run" in words and "backend=cuda" in words
    assert "${" not in out.replace("${OMP_NUM_THREADS:-8}", "")    # every placeholder filled


def test_kubernetes_manifest_is_an_indexed_job_and_its_rendezvous_service(capsys):
    code, out, _ = render(capsys, "k8s", "--nodes", "4", "--gpus-per-node", "8", "--image", "reg/weblm:1",
                          "--job-name", "run-7", "-o", "parallel.dp=32", *BATCH)
    assert code == 0
    service, job = list(yaml.safe_load_all(out))
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["name"] == "run-7" and service["spec"]["selector"] == {"job-name": "run-7"}
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "run-7" and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["image"] == "reg/weblm:1" and container["resources"]["limits"]["nvidia.com/gpu"] == 8
    words = shlex.split(container["args"][0])
    assert "--nnodes=4" in words and "--nproc-per-node=8" in words
    assert "--rdzv-endpoint=run-7-0.run-7:29500" in words             # pod 0 through the headless service
    assert "--node-rank=$JOB_COMPLETION_INDEX" in words and "parallel.dp=32" in words


def test_a_layout_that_does_not_fill_the_world_is_refused(capsys):
    code, out, err = render(capsys, "slurm", "--nodes", "2", "--gpus-per-node", "8", "-o", "parallel.dp=8", *BATCH)
    assert code == 2 and not out and "16 ranks; set -o parallel.dp=16" in err
    code, _, err = render(capsys, "k8s", "--nodes", "2", "--gpus-per-node", "4", "-o", "parallel.tp=8",
                          "-o", "parallel.dp=1", *BATCH)
    assert code == 2 and "keep tensor parallelism within a node" in err
    code, _, err = render(capsys, "slurm", "-o", "model.hiden_size=3")
    assert code == 2 and "unknown setting" in err
    code, _, err = render(capsys, "k8s", "--job-name", "Bad_Name")
    assert code == 2 and "DNS label" in err


def test_the_command_line_writes_the_file(tmp_path):
    run = subprocess.run([sys.executable, "-m", "trainer.launch", "slurm", "--nodes", "1", "--gpus-per-node", "8",
                          "-o", "parallel.dp=8", *BATCH], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("#!/bin/bash")
