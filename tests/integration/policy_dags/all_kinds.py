"""A third-party DAG file as a new user would write it, for tests/integration/test_policy_dag_kinds.py.

One task of every operator kind Airflow's standard provider ships (operators, sensors, deferrable
sensors, task decorators), mapped tasks (``@task`` with ``.expand()``, a classic operator's
``.partial().expand()``, a mapped ``@task_group``), a task group, and setup/teardown tasks. The
same DAG twice: ``agora_kinds`` and ``données_été`` (Airflow accepts Unicode DAG ids).
"""

import sys
from datetime import datetime, time, timedelta

from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.datetime import BranchDateTimeOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import (
    ApprovalOperator,
    HITLBranchOperator,
    HITLEntryOperator,
    HITLOperator,
)
from airflow.providers.standard.operators.latest_only import LatestOnlyOperator
from airflow.providers.standard.operators.python import (
    BranchExternalPythonOperator,
    BranchPythonOperator,
    BranchPythonVirtualenvOperator,
    ExternalPythonOperator,
    PythonOperator,
    PythonVirtualenvOperator,
    ShortCircuitOperator,
)
from airflow.providers.standard.operators.smooth import SmoothOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.providers.standard.operators.weekday import BranchDayOfWeekOperator
from airflow.providers.standard.sensors.bash import BashSensor
from airflow.providers.standard.sensors.date_time import DateTimeSensor, DateTimeSensorAsync
from airflow.providers.standard.sensors.external_task import ExternalTaskMarker, ExternalTaskSensor
from airflow.providers.standard.sensors.filesystem import FileSensor
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.providers.standard.sensors.time import TimeSensor, TimeSensorAsync
from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor, TimeDeltaSensorAsync, WaitSensor
from airflow.providers.standard.sensors.weekday import DayOfWeekSensor
from airflow.sdk import DAG, TaskGroup, setup, task, task_group, teardown


def noop(*args, **kwargs):
    return True


@task
def numbers():
    return [1, 2, 3]


@task
def double(x):
    return 2 * x


@task_group
def per_item(x):
    @task
    def scale(y):
        return 10 * y

    @task
    def report(y):
        print(y)

    report(scale(x))


def build(dag_id: str) -> DAG:
    @setup
    def create_cluster():
        return "cluster"

    @teardown  # built per DAG: a teardown decorator keeps its trigger rule in its kwargs
    def delete_cluster(_cluster):
        pass

    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        cluster = create_cluster()
        start = EmptyOperator(task_id="start", executor_config={"agora": {"cores": 1}})
        cluster >> start
        # Mapped: a @task with .expand(), a classic operator with .partial().expand(), a mapped task group.
        doubled = double.expand(x=numbers())
        bashed = BashOperator.partial(task_id="bash_mapped", queue="theirs", pool_slots=1).expand(
            bash_command=["echo 1", "echo 2"]
        )
        grouped = per_item.expand(x=[1, 2])
        start >> [doubled, bashed, grouped]
        with TaskGroup("plain_group"):
            bash = BashOperator(task_id="bash", bash_command="echo hi", execution_timeout=timedelta(minutes=5))
            python = PythonOperator(task_id="python", python_callable=noop)
            bash >> python
        branch = BranchPythonOperator(task_id="branch", python_callable=lambda: "short_circuit")
        short = ShortCircuitOperator(task_id="short_circuit", python_callable=noop)
        start >> branch >> short
        others = [
            BranchDateTimeOperator(
                task_id="branch_datetime",
                follow_task_ids_if_true=["start"],
                follow_task_ids_if_false=["start"],
                target_lower=time(0),
                target_upper=time(23),
            ),
            BranchDayOfWeekOperator(
                task_id="branch_weekday",
                follow_task_ids_if_true="start",
                follow_task_ids_if_false="start",
                week_day="Monday",
            ),
            LatestOnlyOperator(task_id="latest_only"),
            SmoothOperator(task_id="smooth"),
            TriggerDagRunOperator(task_id="trigger", trigger_dag_id="elsewhere"),
            PythonVirtualenvOperator(task_id="virtualenv", python_callable=noop, requirements=[]),
            BranchPythonVirtualenvOperator(task_id="branch_virtualenv", python_callable=noop),
            ExternalPythonOperator(task_id="external_python", python=sys.executable, python_callable=noop),
            BranchExternalPythonOperator(task_id="branch_external", python=sys.executable, python_callable=noop),
            HITLOperator(task_id="hitl", subject="Go?", options=["yes", "no"]),
            ApprovalOperator(task_id="approval", subject="Approve?"),
            HITLBranchOperator(task_id="hitl_branch", subject="Where?", options=["start"]),
            HITLEntryOperator(task_id="hitl_entry", subject="Enter"),
            BashSensor(task_id="bash_sensor", bash_command="true", poke_interval=5),
            DateTimeSensor(task_id="datetime_sensor", target_time="2026-01-01T00:00:00+00:00"),
            DateTimeSensorAsync(task_id="datetime_sensor_async", target_time="2026-01-01T00:00:00+00:00"),
            ExternalTaskSensor(task_id="external_sensor", external_dag_id="elsewhere", external_task_id="x"),
            ExternalTaskMarker(task_id="external_marker", external_dag_id="elsewhere", external_task_id="x"),
            FileSensor(task_id="file_sensor", filepath="/tmp/nothing", mode="reschedule"),
            PythonSensor(task_id="python_sensor", python_callable=noop, mode="reschedule", poke_interval=60),
            TimeSensor(task_id="time_sensor", target_time=time(1)),
            TimeSensorAsync(task_id="time_sensor_async", target_time=time(1)),
            TimeDeltaSensor(task_id="timedelta_sensor", delta=timedelta(seconds=1), deferrable=True),
            TimeDeltaSensorAsync(task_id="timedelta_sensor_async", delta=timedelta(seconds=1)),
            WaitSensor(task_id="wait_sensor", time_to_wait=timedelta(seconds=1)),
            DayOfWeekSensor(task_id="weekday_sensor", week_day="Monday", mode="reschedule"),
        ]
        start >> others

        @task.bash
        def bash_decorated():
            return "echo hi"

        @task.branch
        def branch_decorated():
            return "start"

        @task.short_circuit
        def short_circuit_decorated():
            return True

        @task.sensor(poke_interval=60, mode="reschedule")
        def sensor_decorated():
            return True

        @task.virtualenv(requirements=[])
        def virtualenv_decorated():
            pass

        @task.branch_virtualenv
        def branch_virtualenv_decorated():
            return "start"

        @task.external_python(python=sys.executable)
        def external_python_decorated():
            pass

        @task.branch_external_python(python=sys.executable)
        def branch_external_python_decorated():
            return "start"

        @task.stub
        def stub_decorated(): ...

        decorated = [
            bash_decorated(),
            branch_decorated(),
            short_circuit_decorated(),
            sensor_decorated(),
            virtualenv_decorated(),
            branch_virtualenv_decorated(),
            external_python_decorated(),
            branch_external_python_decorated(),
            stub_decorated(),
        ]
        start >> decorated
        [short, *others, *decorated, python] >> delete_cluster(cluster)
    return dag


build("agora_kinds")
build("données_été")
