"""Launch files for a multi-node training run: a SLURM batch script and a Kubernetes Job, both starting
`torchrun` (elastic: restarts a failed worker group up to --max-restarts times) around `trainer.train`.

    python -m trainer.launch slurm --nodes 4 --gpus-per-node 8 [-o key=value ...] > train.sbatch
    python -m trainer.launch k8s --nodes 4 --gpus-per-node 8 --image REGISTRY/weblm:TAG [-o ...] > train.yaml

Rendered from string templates in trainer/templates/ (package data: they ship in the wheel, so an installed
trainer renders them too), so the files a user edits are the files we test.
The rendezvous is torchrun's c10d store on the first node; every rank resumes from the run folder's
last checkpoint (`--resume`), so a restarted worker group continues instead of starting over.
"""
from __future__ import annotations

import argparse
import shlex
import string
import sys
from dataclasses import dataclass
from pathlib import Path

from conf import ConfigError, split_paths_overrides
from conf.paths import load_paths
from trainer.config import load_trainer_config

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Launch:
    nodes: int
    gpus_per_node: int
    overrides: tuple[str, ...]
    job_name: str = "weblm-train"
    image: str = "weblm:latest"
    max_restarts: int = 3
    port: int = 29500

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(f"--nodes and --gpus-per-node must be positive, got {self.nodes}, {self.gpus_per_node}")
        if not self.job_name.replace("-", "").isalnum() or self.job_name != self.job_name.lower():
            raise ValueError(f"--job-name {self.job_name!r}: lower-case letters, digits and '-' only (a DNS label)")

    def train_args(self) -> str:
        args = ["-m", "trainer.train", "--resume", "-o", "backend=cuda"]
        for override in self.overrides:
            args += ["-o", override]
        return " ".join(shlex.quote(a) for a in args)

    def render(self, kind: str) -> str:
        template = string.Template((TEMPLATES / {"slurm": "train.sbatch", "k8s": "train.yaml"}[kind]).read_text())
        return template.substitute(
            NODES=self.nodes, GPUS_PER_NODE=self.gpus_per_node, WORLD_SIZE=self.nodes * self.gpus_per_node,
            JOB_NAME=self.job_name, IMAGE=self.image, MAX_RESTARTS=self.max_restarts, PORT=self.port,
            TRAIN_ARGS=self.train_args())


def check_overrides(launch: Launch) -> None:
    """The settings must load as trainer.train will load them, and the layout must fill the world."""
    trainer_overrides, path_overrides = split_paths_overrides(list(launch.overrides))
    cfg = load_trainer_config([*trainer_overrides, "backend=cuda"])
    load_paths(path_overrides)   # they must load as trainer.train will load them
    p = cfg.parallel
    world = launch.nodes * launch.gpus_per_node
    if p.tp * p.pp * p.cp * p.dp != world:
        raise ConfigError(f"parallel tp*pp*cp*dp = {p.tp}*{p.pp}*{p.cp}*{p.dp} = {p.tp * p.pp * p.cp * p.dp}, but "
                          f"{launch.nodes} nodes x {launch.gpus_per_node} GPUs = {world} ranks; "
                          f"set -o parallel.dp={world // max(p.tp * p.pp * p.cp, 1)}")
    if p.tp > launch.gpus_per_node:
        raise ConfigError(f"parallel.tp {p.tp} spans nodes ({launch.gpus_per_node} GPUs each): keep tensor "
                          "parallelism within a node")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("slurm", "k8s"))
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--job-name", default="weblm-train")
    parser.add_argument("--image", default="weblm:latest", help="container image (k8s) holding the project")
    parser.add_argument("--max-restarts", type=int, default=3, help="torchrun's elastic restarts of a worker group")
    parser.add_argument("-o", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to trainer.train (e.g. parallel.tp=8, paths.train_dir=s3://bucket/run)")
    args = parser.parse_args(argv)
    try:
        launch = Launch(args.nodes, args.gpus_per_node, tuple(args.overrides), args.job_name, args.image,
                        args.max_restarts)
        check_overrides(launch)
    except (ValueError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(launch.render(args.kind))
    return 0


if __name__ == "__main__":
    sys.exit(main())
