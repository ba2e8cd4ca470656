"""The demo's stage runner: independent stages run side by side, each logged on its own; a failure is raised
only once the other stage has ended, so no stage keeps running behind a failed demo."""
import sys

import pytest

from demo.config import load_demo_config
from demo.run import StageFailed, run_stages_together

# each stage marks that it started, then waits for the other's mark: run one after the other, the first would
# wait in vain and exit 1
MEET = ("import pathlib, sys, time; here = pathlib.Path(sys.argv[1]); here.joinpath(sys.argv[2]).touch()\n"
        "deadline = time.time() + 60\n"
        "while not here.joinpath(sys.argv[3]).exists():\n"
        "    if time.time() > deadline: sys.exit(1)\n"
        "    time.sleep(0.05)\n"
        "print('met')")


def test_stages_run_side_by_side_and_a_failure_waits_for_the_other(tmp_path):
    cfg = load_demo_config(["stage_timeout_s=120"])
    meet = lambda me, other: [sys.executable, "-c", MEET, str(tmp_path), me, other]   # noqa: E731
    runs = run_stages_together({"a": meet("a.mark", "b.mark"), "b": meet("b.mark", "a.mark")}, {}, tmp_path, cfg)
    assert [r.name for r in runs] == ["a", "b"]
    assert (tmp_path / "a.log").read_text() == "met\n" == (tmp_path / "b.log").read_text()

    fail = [sys.executable, "-c", "import sys; print('broken input'); sys.exit(3)"]
    with pytest.raises(StageFailed, match=r"(?s)stage bad exited with 3.*broken input"):
        run_stages_together({"bad": fail, "slow": meet("slow.mark", "bad.log")}, {}, tmp_path, cfg)
    assert (tmp_path / "slow.log").read_text() == "met\n", "the other stage ran to its end before the raise"
