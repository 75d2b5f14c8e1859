"""Build a :class:`RunRecord` from what a DAG run left behind: pure, no Airflow, no database.

The caller gathers the DAG run's times and state, its task attempts (every try; the record's
task table keeps the last try of each task instance), the plan in force (found by the version
its attempts name, :func:`run_plan_version`), the catalog's resources and the
:class:`LeaseRecord` s backends reported. Everything missing becomes a note, never an error: a
run of a DAG with no plan is an unplanned record, a plan gone from the store leaves the planned
numbers empty.

Actual cost (``docs/runs.md``): every reported LeaseRecord priced with its resource's billing
rule; a planned machine no backend reported (a local pool) held from its tasks' first start to
their last end, every try included (a failed try held the machine too); an attempt on no machine
is its own lease on its resource. A resource the catalog does not know costs 0, with a note.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import instance_id, split_instance
from agora_optimizer.model.plan import Plan, machine_type
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair, RunLease, RunRecord, RunTask
from agora_optimizer.traces.records import TaskAttempt

TASK_TIMES = "task times"
ATTEMPT = "attempt"
NOT_IN_RUN = "not in run"  # a planned task instance the run does not have


def last_tries(attempts: Iterable[TaskAttempt]) -> list[TaskAttempt]:
    """The last try of each task instance (task id, map index), in task order."""
    last: dict[tuple[str, int], TaskAttempt] = {}
    for attempt in attempts:
        key = (attempt.task_id, attempt.map_index)
        if key not in last or attempt.try_number >= last[key].try_number:
            last[key] = attempt
    return [last[key] for key in sorted(last)]


def run_plan_version(attempts: Iterable[TaskAttempt]) -> tuple[str, list[str]]:
    """The plan version the run's last tries name most (``""``: no plan placed the run), and every one named."""
    counts = Counter(a.plan_version for a in last_tries(attempts) if a.plan_version)
    if not counts:
        return "", []
    ranked = [version for version, _ in counts.most_common()]
    return ranked[0], ranked


def build_run_record(
    dag_id: str,
    run_id: str,
    state: str,
    started_at: datetime | None,
    ended_at: datetime | None,
    attempts: Iterable[TaskAttempt],
    plan: Plan | None,
    resources: Mapping[str, Resource],
    lease_records: Iterable[LeaseRecord] = (),
    repairs: Iterable[Repair] = (),
    never_ran: Mapping[str, str] | None = None,
) -> RunRecord:
    """The run's record. ``plan`` is the plan whose version the attempts name (None if it is not found).

    ``never_ran``: Airflow's state of each task instance of the run that never started, by plan name
    (``skipped`` by a branch, ``upstream_failed``...). A planned task the run never ran gets that state,
    or :data:`NOT_IN_RUN` when Airflow's states are given and the run has no such task instance (a
    mapped task's planned instance beyond its run's width, a task removed from the DAG); without
    them, ``not run``. Its planned slot was freed for the tasks behind it either way."""
    every = [a for a in attempts if (a.dag_id, a.run_id) == (dag_id, run_id)]
    last = last_tries(every)
    notes: list[str] = []
    version, versions = run_plan_version(every)
    if len(versions) > 1:
        notes.append(
            f"tasks of this run name {len(versions)} plan versions ({', '.join(versions)}); compared with {version}"
        )
    if version and plan is None:
        notes.append(f"plan {version} of DAG {dag_id} is not in the plan store: planned numbers unknown")
    plan = plan if version else None

    origin = started_at
    if origin is None:
        starts = [a.started_at for a in every if a.started_at is not None]
        origin = min(starts) if starts else None
        notes.append("the DAG run has no start time: times count from its first task's start")

    def seconds(moment: datetime | None) -> float | None:
        return None if moment is None or origin is None else (moment - origin).total_seconds()

    assignments = {a.task: a for a in plan.assignments} if plan is not None else {}
    tasks = []
    seen: set[str] = set()
    for attempt in last:
        name = instance_id(attempt.task_id, attempt.map_index)  # a mapped task's instance: task[i] in the plan
        planned = assignments.get(name)
        seen.add(name)
        tasks.append(
            RunTask(
                task_id=attempt.task_id,
                map_index=attempt.map_index,
                try_number=attempt.try_number,
                state=attempt.state,
                planned_resource=planned.resource if planned else "",
                planned_machine=planned.machine if planned else "",
                planned_start_s=planned.start_s if planned else None,
                planned_end_s=planned.end_s if planned else None,
                actual_resource=attempt.resource_type,
                actual_machine=attempt.machine,
                actual_start_s=seconds(attempt.started_at),
                actual_end_s=seconds(attempt.ended_at),
            )
        )
    for name in sorted(assignments.keys() - seen):  # planned, never run (skipped, beyond a mapped task's width)
        a = assignments[name]
        task_id, map_index = split_instance(name)
        why = "not run" if never_ran is None else never_ran.get(name, NOT_IN_RUN)
        tasks.append(
            RunTask(
                task_id,
                map_index,
                state=why,
                planned_resource=a.resource,
                planned_machine=a.machine,
                planned_start_s=a.start_s,
                planned_end_s=a.end_s,
            )
        )

    ends = [a.ended_at for a in last if a.ended_at is not None]
    actual_makespan_s = seconds(max(ends)) if ends else None
    if actual_makespan_s is None:
        notes.append("no task of the run has ended: actual makespan unknown")

    if origin is None:  # nothing ran and Airflow has no start: no lease to price
        leases: list[RunLease] = []
    else:
        start_of_run = origin
        leases = _leases(
            dag_id, run_id, every, lease_records, resources, lambda t: (t - start_of_run).total_seconds(), notes
        )
    return RunRecord(
        dag_id=dag_id,
        run_id=run_id,
        state=state,
        planned=bool(version),
        plan_version=version,
        started_at=started_at,
        ended_at=ended_at,
        planned_makespan_s=plan.makespan_s if plan is not None else None,
        actual_makespan_s=actual_makespan_s,
        planned_cost_usd=plan.cost_usd if plan is not None else None,
        planned_expected_cost_usd=plan.spot.expected_cost_usd if plan is not None and plan.spot is not None else None,
        actual_cost_usd=sum(lease.cost_usd for lease in leases),
        tasks=tuple(sorted(tasks, key=lambda t: (t.task_id, t.map_index))),
        leases=tuple(leases),
        repairs=tuple(sorted(repairs, key=lambda r: r.at_s)),
        notes=tuple(notes),
    )


def _leases(
    dag_id: str,
    run_id: str,
    attempts: list[TaskAttempt],
    lease_records: Iterable[LeaseRecord],
    resources: Mapping[str, Resource],
    to_s: Callable[[datetime], float],
    notes: list[str],
) -> list[RunLease]:
    """Reported leases, then planned machines no backend reported, then attempts on no machine.

    ``to_s`` turns a time into seconds from the run's start.
    """
    spans: list[tuple[str, str, float, float, str, str]] = []  # machine, resource, start, end, source, external id
    reported = {
        (r.backend, r.machine, r.external_id, r.started_at): r
        for r in lease_records
        if (r.dag_id, r.run_id) == (dag_id, run_id)
    }
    for record in sorted(reported.values(), key=lambda r: (r.started_at, r.machine)):
        start, end = to_s(record.started_at), to_s(record.ended_at)
        spans.append((record.machine, record.resource, start, end, record.source, record.external_id))
    covered = {r.machine for r in reported.values()}
    machines: dict[str, list[tuple[str, float, float]]] = defaultdict(list)  # resource, start, end
    for attempt in attempts:
        if attempt.started_at is None or attempt.ended_at is None:
            continue
        start, end = to_s(attempt.started_at), to_s(attempt.ended_at)
        if not attempt.machine:
            spans.append(("", attempt.resource_type, start, end, ATTEMPT, ""))
        elif attempt.machine not in covered:
            machines[attempt.machine].append((attempt.resource_type, start, end))
    for machine in sorted(machines):
        held = machines[machine]
        name = next((resource for resource, _, _ in held if resource), "") or machine_type(machine)
        first, last = min(start for _, start, _ in held), max(end for _, _, end in held)
        spans.append((machine, name, first, last, TASK_TIMES, ""))

    leases = []
    unknown: Counter[str] = Counter()
    for machine, name, start, end, source, external_id in spans:
        resource = resources.get(name)
        if resource is None:
            unknown[name] += 1
        cost = resource.lease_cost_usd(end - start) if resource is not None else 0.0
        leases.append(RunLease(machine, name, start, end, cost, source, external_id))
    for name, count in sorted(unknown.items()):
        what = f"resource {name!r} is not in the catalog" if name else "no resource is named"
        notes.append(f"{what}: {count} lease(s) on it counted at 0 USD")
    return leases
