"""Benchmark: how fast the re-planning engine answers on real workflows of up to ~1,000 tasks, and what it answers.

Usage: python bench/run_replan.py [--instances DIR] [--workflows bwa-chameleon-large-001 ...]
                                  [--catalogs catalogs/aws-us-east-1.yaml catalogs/local.yaml]
                                  [--objectives time cost balanced] [--plan-time-limit-s 10]
                                  [--deadline-factor F] [--repeats 3] [--out bench/results/replan.md]

For each WfInstances workflow, catalog and objective, ``optimize`` makes the initial plan (with
``--deadline-factor F``, under a deadline of F times the makespan of the plan for time, so that a
drift puts it at risk and the re-plan buys time: the objective column says ``cost <= Fx``). A run of
it then drifts: a seeded tenth of the tasks take twice their runtime, and every task starts as soon
as its planned machine and its parents allow (:func:`agora_optimizer.planning.retime.retime`, the
plan's order kept on each machine). At three moments the run is re-planned with
:func:`agora_optimizer.planning.replan.replan`:

- ``slow@10%`` and ``slow@50%``: at 10 % and 50 % of the drifted run's makespan, tasks ended by then
  are done, those started are running, the rest pending;
- ``oom@10%``: as ``slow@10%``, but the running task that started last was OOM-killed: pending
  again, its retry reserving 1.5x its memory.

The re-plan is timed ``--repeats`` times (its worst is reported, with the replan's own time
limit of 0.8 s for the list schedule); its whole schedule (what ran, as it ran, and what is
planned) is checked with the validator against the workflow as it ran. Columns: tasks pending,
the worst wall time, which schedule won (``kept``: the plan shifted; ``list``: the list scheduler;
``list s``: the list schedule's own time, ``-`` when abandoned at the limit), tasks moved to
another machine (and type), and the predicted makespan and cost of the whole run over the plan's.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Assignment, Objective, Plan, Workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import SolverInfo
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.replan import replan
from agora_optimizer.planning.retime import retime, start_order
from agora_optimizer.planning.run_state import Done, Pending, Replan, Running, TaskState
from agora_optimizer.planning.validate import validate_plan

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKFLOWS = ("bwa-chameleon-large-001", "montage-chameleon-2mass-03d-001")
DEFAULT_CATALOGS = ("catalogs/aws-us-east-1.yaml", "catalogs/local.yaml")
SLOW_SHARE, SLOW_FACTOR, OOM_FACTOR = 0.1, 2.0, 1.5
SCENARIOS = (("slow@10%", 0.1, False), ("slow@50%", 0.5, False), ("oom@10%", 0.1, True))  # (name, now / run, OOM)


def drifted_run(workflow: Workflow, catalog: Catalog, plan: Plan, seed: int) -> list[Assignment]:
    """The plan as it ran when a seeded tenth of the tasks took twice as long."""
    rng = random.Random(seed)
    slow = set(rng.sample([t.id for t in workflow.tasks], max(1, int(len(workflow.tasks) * SLOW_SHARE))))
    tasks = [replace(t, runtime_s=t.runtime_s * (SLOW_FACTOR if t.id in slow else 1.0)) for t in workflow.tasks]
    slowed = Workflow.create(workflow.name, tasks, workflow.edges)
    machine_of = {a.task: a.machine for a in plan.assignments}
    return retime(slowed, catalog, machine_of, start_order(plan.assignments, workflow))


def state_at(ran: list[Assignment], now_s: float, oom: bool, workflow: Workflow) -> dict[str, TaskState]:
    state: dict[str, TaskState] = {}
    running = []
    for a in ran:
        if a.end_s <= now_s:
            state[a.task] = Done(a.machine, a.end_s, a.start_s)
        elif a.start_s <= now_s:
            state[a.task] = Running(a.machine, a.start_s)
            running.append(a)
    if oom and running:
        killed = max(running, key=lambda a: (a.start_s, a.task))
        state[killed.task] = Pending(memory_bytes=int(workflow.by_id[killed.task].memory_bytes * OOM_FACTOR))
    return state


def violations(workflow: Workflow, catalog: Catalog, result: Replan, objective: Objective) -> list[str]:
    """The validator's findings on the whole re-planned run, against the workflow as it ran."""
    took = {a.task: (a.end_s - a.start_s) * catalog.by_name[a.resource].speed for a in result.fixed}
    ran = Workflow.create(
        workflow.name, [replace(t, runtime_s=took.get(t.id, t.runtime_s)) for t in workflow.tasks], workflow.edges
    )
    items = tuple(sorted(result.schedule, key=lambda a: (a.start_s, a.task)))
    whole = Plan(
        workflow.name,
        "bench",
        replace(objective, deadline_s=None),  # a deadline the run misses is no fault of the schedule's
        makespan_s(items),
        cost_usd(items, catalog),
        items,
        SolverInfo("replan", "heuristic", None, 0.0),
        "2026-12-01T00:00:00Z",
    )
    return [str(v) for v in validate_plan(whole, ran, catalog)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=Path, default=ROOT.parent / "shared" / "data" / "wfinstances")
    parser.add_argument("--workflows", nargs="+", default=list(DEFAULT_WORKFLOWS))
    parser.add_argument("--catalogs", nargs="+", default=list(DEFAULT_CATALOGS))
    parser.add_argument("--objectives", nargs="+", default=["time", "cost", "balanced"])
    parser.add_argument("--plan-time-limit-s", type=float, default=10.0)
    parser.add_argument("--deadline-factor", type=float, default=None, help="plans under F x the time plan's makespan")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replan.md")
    args = parser.parse_args()

    load_before = os.getloadavg()
    rows: list[str] = []
    worst = 0.0
    invalid = 0
    for name in args.workflows:
        workflow = load_workflow(args.instances / f"{name}.json")
        for catalog_path in args.catalogs:
            catalog = load_catalog(ROOT / catalog_path)
            label = Path(catalog_path).stem
            deadline_s, shown = None, {kind: kind for kind in args.objectives}
            if args.deadline_factor is not None:
                fastest = optimize(workflow, catalog, Objective(kind="time"), label, args.plan_time_limit_s)
                deadline_s = args.deadline_factor * fastest.makespan_s
                shown = {kind: f"{kind} <= {args.deadline_factor:g}x" for kind in args.objectives}
            for kind in args.objectives:
                objective = Objective(kind=kind, deadline_s=deadline_s)
                plan = optimize(workflow, catalog, objective, label, time_limit_s=args.plan_time_limit_s)
                ran = drifted_run(workflow, catalog, plan, args.seed)
                run_makespan = max(a.end_s for a in ran)
                for scenario, share, oom in (
                    ("slow@10%", 0.1, False),
                    ("slow@50%", 0.5, False),
                    ("oom@10%", 0.1, True),
                ):
                    now = run_makespan * share
                    state = state_at(ran, now, oom, workflow)
                    walls = []
                    result: Replan | None = None
                    for _ in range(args.repeats):
                        started = time.perf_counter()
                        result = replan(workflow, catalog, plan, state, now)
                        walls.append(time.perf_counter() - started)
                    assert result is not None
                    found = violations(workflow, catalog, result, objective)
                    invalid += bool(found)
                    worst = max(worst, max(walls))
                    list_s = "-" if result.list_wall_s is None else f"{result.list_wall_s:.3f}"
                    cost_ratio = f"{result.cost_usd / plan.cost_usd:.3f}" if plan.cost_usd > 0 else "-"
                    rows.append(
                        f"| {name} | {len(workflow.tasks)} | {label} | {shown[kind]} | {scenario} "
                        f"| {len(result.assignments)} "
                        f"| {max(walls):.3f} | {result.method} | {list_s} "
                        f"| {len(result.moved_machine)} ({len(result.moved_resource)}) "
                        f"| {result.makespan_s / plan.makespan_s:.3f} | {cost_ratio} "
                        f"| {'yes' if not found else found[0]} |"
                    )
                    print(rows[-1], file=sys.stderr, flush=True)

    command = "python bench/run_replan.py " + shlex.join(sys.argv[1:])
    text = [
        "# Re-planning a drifted run: wall time and answers",
        "",
        f"Command: `{command.strip()}`. Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"Machine: {os.cpu_count()} cores ({platform.machine()}, Python {platform.python_version()}), "
        f"shared with other jobs (load average {load_before[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end).",
        "",
        f"Initial plans: `optimize` with a {args.plan_time_limit_s:g} s limit. Drift: {SLOW_SHARE:.0%} of the "
        f"tasks (seed {args.seed}) take {SLOW_FACTOR:g}x their runtime; `oom` makes the last-started running "
        f"task pending again with {OOM_FACTOR:g}x its memory. Wall: the worst of {args.repeats} re-plans. "
        "Moved: pending tasks on another machine than planned (on another type). Makespan and cost: "
        "the whole run's prediction over the plan's. Valid: the validator finds nothing in the whole "
        "schedule against the workflow as it ran.",
        "",
        "| workflow | tasks | catalog | objective | scenario | pending | wall s | won | list s "
        "| moved | makespan / plan | cost / plan | valid |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Re-plans: {len(rows)}; worst wall time {worst:.3f} s; invalid: {invalid}.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text))
    print(f"worst wall {worst:.3f} s, invalid {invalid}; written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
