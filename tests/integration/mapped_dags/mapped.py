"""A DAG with every way of mapping a task, for tests/integration/test_mapped_planning.py.

``square`` maps over an upstream task's output (its width is known only at run time), ``echo``
over a literal list (three), the task group ``per_item`` over a literal list (two).
"""

from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task, task_group


@task
def numbers():
    return list(range(6))


@task
def square(x):
    return x * x


@task
def total(values):
    return sum(values)


@task_group
def per_item(x):
    @task
    def scale(y):
        return 10 * y

    @task
    def report(y):
        print(y)

    report(scale(x))


with DAG("agora_mapped", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    squared = square.expand(x=numbers())
    total(squared)
    echo = BashOperator.partial(task_id="echo").expand(bash_command=["echo 1", "echo 2", "echo 3"])
    squared >> echo
    per_item.expand(x=[1, 2])
