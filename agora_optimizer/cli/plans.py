"""``agora plans ...``: put a plan in force for an Airflow DAG, show it, list its history.

The ``agora`` app mounts this as ``app.add_typer(plans_app, name="plans")``; ``agora optimize
airflow:DAG_ID --apply`` saves through the same store. Errors go through
:func:`agora_optimizer.cli.common.user_errors` (one line on stderr, exit code 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agora_optimizer.cli.common import command_group, out_console, say, user_errors
from agora_optimizer.plans.store import PlanStore, default_plan_store

plans_app = command_group("The plans in force for Airflow DAGs (what the cluster policy applies) and their history.")

PlanDirOpt = Annotated[
    Path | None,
    typer.Option("--plan-dir", help="The plan store [default: [agora] plan_dir, or $AIRFLOW_HOME/agora/plans]."),
]


def plan_store(plan_dir: Path | None) -> PlanStore:
    return PlanStore(plan_dir) if plan_dir is not None else default_plan_store()


@plans_app.command("apply")
def apply(
    dag_id: Annotated[str, typer.Argument(help="The Airflow DAG the plan is for.")],
    plan: Annotated[Path, typer.Argument(help="A plan file (agora-plan/1), e.g. from agora optimize.")],
    catalog: Annotated[
        Path | None, typer.Option(help="Check that every planned resource is in this catalog (the executor's).")
    ] = None,
    plan_dir: PlanDirOpt = None,
) -> None:
    """Make PLAN the current plan of DAG_ID; the previous one stays in the history."""
    from agora_optimizer.errors import AgoraError
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.plan_file import load_plan

    with user_errors():
        loaded = load_plan(plan)
        if catalog is not None:
            known = load_catalog(catalog).by_name
            for assignment in loaded.assignments:
                if assignment.resource not in known:
                    raise AgoraError(
                        f"{plan}: task {assignment.task} is planned on {assignment.resource!r}, "
                        f"which {catalog} does not declare"
                    )
        stored = plan_store(plan_dir).save(dag_id, loaded)
    if stored.unchanged:
        say(f"plan of {dag_id} already in force: {len(loaded.assignments)} tasks, no history entry added")
    else:
        say(f"plan of {dag_id} in force: {len(loaded.assignments)} tasks (history: {stored.path})")


@plans_app.command("show")
def show(
    dag_id: Annotated[str, typer.Argument(help="The Airflow DAG.")],
    plan_dir: PlanDirOpt = None,
) -> None:
    """Print the current plan of DAG_ID (JSON)."""
    from agora_optimizer.errors import AgoraError
    from agora_optimizer.io.plan_file import plan_to_dict

    with user_errors():
        stored = plan_store(plan_dir).current(dag_id)
        if stored is None:
            raise AgoraError(f"DAG {dag_id} has no plan; make one with agora optimize airflow:{dag_id} --apply")
    out_console.print_json(json.dumps(plan_to_dict(stored.plan)))


@plans_app.command("history")
def history(
    dag_id: Annotated[str, typer.Argument(help="The Airflow DAG.")],
    plan_dir: PlanDirOpt = None,
) -> None:
    """List the plans DAG_ID has had, in the order they were put in force (the last is current)."""

    with user_errors():
        paths = plan_store(plan_dir).history(dag_id)
    for path in paths:
        say(str(path))
