"""What ``agora optimize`` prints of a plan: its summary (the JSON's numbers), and the table and lines for people."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.cli.common import data_table, out_console, ratio_text, say
from agora_optimizer.model.plan import Plan, SpotFigures
from agora_optimizer.runs.record import ratio

if TYPE_CHECKING:
    from agora_optimizer.planning.problem import Problem


def plan_summary(plan: Plan, baseline: Plan | None, makespan_lb: float, cost_lb: float, out: Path) -> dict[str, Any]:
    def row(p: Plan) -> dict[str, Any]:
        return {
            "makespan_s": p.makespan_s,
            "cost_usd": p.cost_usd,
            "makespan_over_lower_bound": ratio(p.makespan_s, makespan_lb),  # None (null) against a bound of 0
            "cost_over_lower_bound": ratio(p.cost_usd, cost_lb),
            "machines": len({a.machine for a in p.assignments}),
            "resources": sorted({a.resource for a in p.assignments}),
        }

    return {
        "workflow": plan.workflow,
        "tasks": len(plan.assignments),
        "plan": out.as_posix(),
        "objective": plan.objective.__dict__,
        "solver": plan.solver.__dict__,
        "lower_bounds": {"makespan_s": makespan_lb, "cost_usd": cost_lb},
        "agora": row(plan),
        "default": None if baseline is None else {**row(baseline), "resource": baseline.assignments[0].resource},
        "spot": None if plan.spot is None else plan.spot.__dict__,
        "runtime_quantile": plan.runtime_quantile,
    }


def deadline_aim(plan: Plan, aimed: Problem, margin: float) -> dict[str, Any]:
    """Where a plan under a deadline aimed (``--deadline-margin``) and whether it ends by then."""
    aim = aimed.objective.deadline_s
    return {"margin": margin, "aim_s": aim, "met": aim is not None and plan.makespan_s <= aim + 1e-6}


def aim_line(aim: dict[str, Any], deadline_s: float, makespan_s: float) -> str:
    """The deadline's aim for people: where the plan aimed, and where it ends."""
    if aim["margin"] == 0:
        return f"deadline {deadline_s:,.1f} s: planned to the deadline itself (--deadline-margin 0)"
    where = f"aimed {aim['margin']:.0%} early, at {aim['aim_s']:,.1f} s"
    if aim["met"]:
        return f"deadline {deadline_s:,.1f} s: {where}, for the platform's delays; the plan ends at {makespan_s:,.1f} s"
    return (
        f"deadline {deadline_s:,.1f} s: {where}; no plan found ends by then, so the earliest found, at "
        f"{makespan_s:,.1f} s"
    )


def spot_line(figures: SpotFigures) -> str:
    """A plan's spot figures for people (``docs/spot.md``)."""
    return (
        f"spot: {figures.spot_tasks} tasks on spot types, {figures.expected_reruns:.4f} expected re-runs; "
        f"expected cost {figures.expected_cost_usd:.6f} USD with them, worst-case makespan "
        f"{figures.worst_case_makespan_s:,.3f} s (one interrupted at the worst moment)"
    )


def print_summary(summary: dict[str, Any]) -> None:
    bounds = summary["lower_bounds"]

    def row(label: str, numbers: dict[str, Any], machines: str) -> list[str]:
        return [
            label,
            f"{numbers['makespan_s']:,.1f}",
            f"{numbers['cost_usd']:.4f}",
            ratio_text(numbers["makespan_s"], bounds["makespan_s"]),
            ratio_text(numbers["cost_usd"], bounds["cost_usd"]),
            machines,
        ]

    ours, default = summary["agora"], summary["default"]
    rows = [row("agora", ours, str(ours["machines"]))]
    if default:
        rows.append(row("one-type default", default, str(default["machines"])))
    rows.append(row("lower bound", bounds, ""))
    columns = ("", "makespan (s)", "cost (USD)", "makespan / LB", "cost / LB", "machines")
    title = f"{summary['workflow']} ({summary['tasks']} tasks), objective {summary['objective']['kind']}"
    out_console.print(data_table(title, columns, rows, right=columns[1:]))
    if summary["spot"]:
        say(spot_line(SpotFigures(**summary["spot"])))
    if summary.get("deadline_aim"):
        say(aim_line(summary["deadline_aim"], summary["objective"]["deadline_s"], ours["makespan_s"]))
    if default:
        makespan = ratio_text(ours["makespan_s"], default["makespan_s"], "{:+.1%}", change=True)
        cost = ratio_text(ours["cost_usd"], default["cost_usd"], "{:+.1%}", change=True)
        say(f"against the one-type default (every task on {default['resource']}): makespan {makespan}, cost {cost}")
    for name, release_s in sorted(summary.get("release_s", {}).items()):
        say(f"{name}: released at {release_s:,.0f} s (predicted queue wait, not billed)")
    for line in summary["details"]:  # -v
        say(line)
    say(f"assumed: {summary['assumed']}; runtimes: {summary['runtimes']}")
    say(f"plan written to {summary['plan']}")
