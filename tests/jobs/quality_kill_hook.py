"""The quality job, stopped at a named point until it is killed (test_quality_rerun.py):

    python tests/jobs/quality_kill_hook.py POINT MARKER_FILE [quality job arguments...]

POINT is `signals_write` (signals scored, silver.signals not yet committed) or `decide` (silver.signals committed,
silver.quality not yet written).  The job writes MARKER_FILE when it reaches the point, then waits there.
"""
import sys
import time
from pathlib import Path

from jobs.quality import job

POINTS = {"signals_write": "upsert_table", "decide": "filtered_view"}


def main() -> None:
    point, marker, argv = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]

    def wait_here(*args, **kwargs):
        marker.write_text(point)
        time.sleep(3600)

    setattr(job, POINTS[point], wait_here)
    job.QualityJob().run(argv)
    raise SystemExit(f"the quality job finished without reaching {point}")


if __name__ == "__main__":
    main()
