"""pgcdc as an Airflow DAG: ingest every 5 minutes, then a health check; compaction daily.

Copy it into your DAGs folder and set PGCDC (the pgcdc command of the virtualenv) and
CONFIG. pgcdc's exit codes (docs/operations.md): 0 ok, 1 attention, 2 usage, 3 busy,
4 failure. Busy skips the slot (the run before is still going); failure is retried.
"""

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

PGCDC = "/srv/pgcdc/.venv/bin/pgcdc"
CONFIG = "/srv/pgcdc/pgcdc.toml"
BUSY = 3  # BashOperator marks the task skipped on this exit code

with DAG(
    dag_id="pgcdc_sync",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 3, "retry_delay": timedelta(minutes=1), "retry_exponential_backoff": True},
) as dag:
    ingest = BashOperator(
        task_id="ingest",
        bash_command=f"{PGCDC} --config {CONFIG} --log-format json ingest",
        skip_on_exit_code=BUSY,
    )
    # exit 1 (ATTENTION) fails the task: a person must look; no retries, it would say the same
    status = BashOperator(
        task_id="status",
        bash_command=f"{PGCDC} --config {CONFIG} status --json",
        retries=0,
    )
    ingest >> status

with DAG(
    dag_id="pgcdc_compact",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
) as compact_dag:
    # waits (up to 5 minutes) for a running ingest of the consumer to end, never overlaps one
    BashOperator(task_id="compact", bash_command=f"{PGCDC} --config {CONFIG} compact", skip_on_exit_code=BUSY)
