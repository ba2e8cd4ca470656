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
    {'name': 'ingest', 'depends_on': [], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only ingest -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'},
    {'name': 'extract', 'depends_on': ['ingest'], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only extract -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'},
    {'name': 'quality', 'depends_on': ['extract'], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only quality -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'},
    {'name': 'dedup', 'depends_on': ['quality'], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only dedup -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'},
    {'name': 'tokenize', 'depends_on': ['dedup'], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only tokenize -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'},
    {'name': 'export', 'depends_on': ['tokenize'], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only export -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'},
    {'name': 'maintain', 'depends_on': ['export'], 'bash_command': 'spark-submit --master ${SPARK_MASTER} --packages io.delta:delta-spark_4.2_2.13:4.4.0 ${CODE_URI}/pipeline.py --only maintain -o paths.var=${VAR_URI} -o paths.local=/tmp/weblm'}
]

with DAG(
    dag_id='weblm_pipeline',
    description='weblm: ingest -> extract -> quality -> dedup -> tokenize -> export -> maintain',
    schedule='0 3 * * *',
    start_date=pendulum.datetime(2025, 1, 1, tz='UTC'),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=180),
                  "execution_timeout": timedelta(seconds=14400)},
    tags=["weblm"],
    doc_md=__doc__,
) as dag:
    tasks = {}
    for stage in STAGES:
        tasks[stage["name"]] = BashOperator(task_id=stage["name"], bash_command=stage["bash_command"])
        for upstream in stage["depends_on"]:
            tasks[upstream] >> tasks[stage["name"]]
