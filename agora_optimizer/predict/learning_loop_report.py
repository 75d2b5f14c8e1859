"""The learning loop's numbers against the issue's targets, and its markdown table.

Over the runs of :mod:`agora_optimizer.predict.learning_loop` (simulated) or of
``bench/run_learning_loop.py --backend local`` (real): one object per run with ``planned_makespan_s,
actual_makespan_s, deadline_s, deadline_met, planned_cost_usd, actual_cost_usd, truth_plan_cost_usd,
repairs`` and the default's figures. Fields a run lacks (a real run has no truth plan forecast, a
run that failed has none) are left out of the statistic, and the count says how many were used.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agora_optimizer.predict.learning_loop import kept_deadline

TARGETS = {
    "makespan_median_error": 0.15,  # planned before the run vs actual, median over workflows
    "forecast_median_error": 0.10,  # the run's forecast once a quarter has run vs actual
    "forecast_worst_error": 0.30,
    "deadline_met_share": 0.90,  # of the runs whose truth plan meets the deadline
    "cost_over_truth_median": 1.15,
    "saving_gap_median_points": 5.0,  # realised vs planned saving against the default
    "share_over_reservation": 0.02,
    "median_reservation_over_peak": 1.3,
    "runtime_mdape_median": 0.30,  # over families
}


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b > 0 else None


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _worst(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return max(kept) if kept else None


def _error(actual: Any, predicted: Any) -> float | None:
    ratio = _ratio(actual, predicted)
    return None if ratio is None else abs(ratio - 1)


def _saving(ours: Any, theirs: Any) -> float | None:
    ratio = _ratio(ours, theirs)
    return None if ratio is None else 1 - ratio


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures the issue sets targets for, over ``runs`` (those with an ``error`` are counted apart)."""
    ok = [r for r in runs if "error" not in r]
    makespan = [_error(r.get("actual_makespan_s"), r.get("planned_makespan_s")) for r in ok]
    foreseen = [_error(r.get("forecast_makespan_s"), r.get("actual_makespan_s")) for r in ok]
    feasible = [r for r in ok if r.get("truth_meets_deadline")]
    cost_over_truth = [_ratio(r.get("actual_cost_usd"), r.get("truth_plan_cost_usd")) for r in ok]
    savings: dict[str, list[float]] = defaultdict(list)
    gaps: dict[str, list[float]] = defaultdict(list)
    beaten = 0  # runs the default ran both cheaper and sooner than
    default_on_time: list[float] = []  # the cost saving where the default kept the deadline too
    for r in ok:
        realised = {w: _saving(r.get(f"actual_{w}"), r.get(f"default_actual_{w}")) for w in ("cost_usd", "makespan_s")}
        for what, found in realised.items():
            planned = _saving(r.get(f"planned_{what}"), r.get(f"default_planned_{what}"))
            if found is not None:
                savings[what].append(found)
            if found is not None and planned is not None:
                gaps[what].append(100 * abs(found - planned))
        cost_saving, time_saving = realised["cost_usd"], realised["makespan_s"]
        beaten += cost_saving is not None and time_saving is not None and cost_saving < 0 and time_saving < 0
        default_s = r.get("default_actual_makespan_s")
        if cost_saving is not None and default_s is not None and kept_deadline(default_s, r["deadline_s"]):
            default_on_time.append(cost_saving)
    memory_tasks = sum(r.get("memory_tasks") or 0 for r in ok)
    over = sum(r.get("tasks_over_reservation") or 0 for r in ok)
    retries = [r.get("memory_retries") for r in ok if r.get("memory_retries") is not None]
    families: dict[str, list[float]] = defaultdict(list)
    for r in ok:
        if r.get("runtime_mdape") is not None:
            families[r["family"]].append(r["runtime_mdape"])
    family_mdape = {family: statistics.median(values) for family, values in sorted(families.items())}
    return {
        "runs": len(runs),
        "failed": len(runs) - len(ok),
        "makespan_median_error": _median(makespan),
        "makespan_worst_error": _worst(makespan),
        "forecast_runs": sum(1 for f in foreseen if f is not None),
        "forecast_median_error": _median(foreseen),
        "forecast_worst_error": _worst(foreseen),
        "truth_meets_deadline": len(feasible),
        "deadline_met_share": sum(1 for r in feasible if r["deadline_met"]) / len(feasible) if feasible else None,
        "deadline_met_share_all": sum(1 for r in ok if r["deadline_met"]) / len(ok) if ok else None,
        "cost_over_truth_median": _median(cost_over_truth),
        "cost_over_truth_worst": _worst(cost_over_truth),
        "realised_cost_saving_min": min(savings["cost_usd"]) if savings["cost_usd"] else None,
        "realised_cost_saving_median": _median(savings["cost_usd"]),
        "realised_makespan_saving_min": min(savings["makespan_s"]) if savings["makespan_s"] else None,
        "realised_makespan_saving_median": _median(savings["makespan_s"]),
        "runs_default_cheaper_and_sooner": beaten,
        "default_on_time_runs": len(default_on_time),
        "default_on_time_cost_saving_min": min(default_on_time) if default_on_time else None,
        "default_on_time_cost_saving_median": _median(default_on_time),
        "saving_gap_cost_median_points": _median(gaps["cost_usd"]),
        "saving_gap_makespan_median_points": _median(gaps["makespan_s"]),
        "memory_tasks": memory_tasks,
        "share_over_reservation": over / memory_tasks if memory_tasks else None,
        "memory_retries": sum(retries) if retries else None,  # None: runs that do not count them (real ones)
        "median_reservation_over_peak": _median([r.get("median_reservation_over_peak") for r in ok]),
        "repairs_median": _median([r.get("repairs") for r in ok]),
        "runs_with_failed_repairs": sum(1 for r in ok if r.get("repair_failures")),
        "repairs_at_time_limit": _counted(ok, "repairs_at_time_limit"),  # None: runs that do not count them (real)
        "runtime_mdape_by_family": family_mdape,
        "runtime_mdape_median": _median(list(family_mdape.values())),
    }


def _counted(runs: list[dict[str, Any]], field: str) -> int | None:
    """The sum of ``field`` over the runs, None where no run has it."""
    return sum(r.get(field) or 0 for r in runs) if any(field in r for r in runs) else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _num(value: Any, digits: int = 1) -> str:
    return "-" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:,.{digits}f}"


def _repairs(run: dict[str, Any]) -> str:
    failed = run.get("repair_failures") or 0
    return f"{run['repairs']}" + (f" (+{failed} failed)" if failed else "")


def _retries(run: dict[str, Any]) -> str:
    retries = run.get("memory_retries")
    return f" ({retries} retries)" if retries else ""


def _mark(value: float | None, target: float, above: bool = False) -> str:
    if value is None:
        return ""
    return " ✓" if (value >= target if above else value <= target) else " ✗"


def aimed_words(margin: float) -> str:
    """How far before the deadline both plans aimed (a document before the margin has none)."""
    return f" (both plans aimed {margin:.0%} of it early)" if margin else ""


def markdown(document: dict[str, Any]) -> str:
    """The results page: how it was made, one row per run, then the figures against the targets."""
    s = document["summary"]
    simulated = document.get("simulated", True)
    lines = [
        f"# The learning loop{' (simulated, no Airflow)' if simulated else ''}: {document.get('date', '')}",
        "",
        f"`{document['command']}`",
        "",
        f"Catalog `{document['catalog']}`. Each workflow is planned from predictions only (a model trained "
        "without it), for cost under a deadline of "
        f"{document.get('deadline_factor', 1.5):g}x the makespan of its fastest predicted plan"
        f"{aimed_words(document.get('deadline_margin', 0.0))}, then run on the true runtimes with the executor's "
        f"repairs (slack {document.get('slack', 0.2):g}); the truth plan is made from the true runtimes under the "
        "same deadline; the default is the one-type default made from the same predictions.",
        "",
        "| workflow | tasks | deadline (s) | planned (s) | actual (s) | met | forecast@25% (s) | planned (USD) "
        "| actual (USD) | truth plan (USD) | repairs | default actual (s) | default actual (USD) | over res. "
        "| res./peak | MdAPE |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in document["runs"]:
        if "error" in r:
            lines.append(f"| {r['workflow']} | no run: {r['error']} |" + " |" * 14)
            continue
        states = [r.get(f"{kind}state") for kind in ("", "default_")]  # a real run's: Airflow's end state
        shown = ", ".join(f"{kind} run {state}" for kind, state in zip(("agora", "default"), states, strict=True)
                          if state not in (None, "success"))  # fmt: skip
        lines.append(
            f"| {r['workflow']}{f' ({shown})' if shown else ''} | {r['tasks']} | {_num(r['deadline_s'])} "
            f"| {_num(r['planned_makespan_s'])} "
            f"| {_num(r['actual_makespan_s'])} | {'yes' if r['deadline_met'] else 'no'} "
            f"| {_num(r.get('forecast_makespan_s'))} | {_num(r['planned_cost_usd'], 4)} "
            f"| {_num(r['actual_cost_usd'], 4)} | {_num(r.get('truth_plan_cost_usd'), 4)} | {_repairs(r)} "
            f"| {_num(r.get('default_actual_makespan_s'))} | {_num(r.get('default_actual_cost_usd'), 4)} "
            f"| {r.get('tasks_over_reservation', '-')}/{r.get('memory_tasks', '-')}{_retries(r)} "
            f"| {_x(r.get('median_reservation_over_peak'))} | {_pct(r.get('runtime_mdape'))} |"
        )
    t = TARGETS
    rows = [
        ("makespan: planned vs actual, median |actual/planned - 1|", _pct(s["makespan_median_error"]),
         f"<= {t['makespan_median_error']:.0%}{_mark(s['makespan_median_error'], t['makespan_median_error'])}"),
        ("makespan: worst", _pct(s["makespan_worst_error"]), ""),
        ("forecast once 25 % has run vs actual: median", _pct(s["forecast_median_error"]),
         f"<= {t['forecast_median_error']:.0%}{_mark(s['forecast_median_error'], t['forecast_median_error'])}"),
        ("forecast: worst", _pct(s["forecast_worst_error"]),
         f"<= {t['forecast_worst_error']:.0%}{_mark(s['forecast_worst_error'], t['forecast_worst_error'])}"),
        (f"deadline met, of the {s['truth_meets_deadline']} runs whose truth plan meets it",
         _pct(s["deadline_met_share"]),
         f">= {t['deadline_met_share']:.0%}{_mark(s['deadline_met_share'], t['deadline_met_share'], above=True)}"),
        ("actual cost / truth plan's cost: median", _x(s["cost_over_truth_median"]),
         f"<= {t['cost_over_truth_median']:g}x{_mark(s['cost_over_truth_median'], t['cost_over_truth_median'])}"),
        ("actual cost / truth plan's cost: worst", _x(s["cost_over_truth_worst"]), ""),
        ("realised saving against the default, cost: lowest / median",
         f"{_pct(s['realised_cost_saving_min'])} / {_pct(s['realised_cost_saving_median'])}",
         f">= 0{_mark(s['realised_cost_saving_min'], 0.0, above=True)}"),
        ("realised saving against the default, makespan: lowest / median",
         f"{_pct(s['realised_makespan_saving_min'])} / {_pct(s['realised_makespan_saving_median'])}",
         f">= 0{_mark(s['realised_makespan_saving_min'], 0.0, above=True)}"),
        ("runs the default ran both cheaper and sooner than", f"{s['runs_default_cheaper_and_sooner']} of "
         f"{s['runs'] - s['failed']}", ""),
        (f"realised saving, cost, in the {s['default_on_time_runs']} runs where the default kept the deadline too: "
         "lowest / median",
         f"{_pct(s['default_on_time_cost_saving_min'])} / {_pct(s['default_on_time_cost_saving_median'])}", ""),
        *(
            (f"realised vs planned saving, {what}: median gap (points)", _num(s[f"saving_gap_{what}_median_points"]),
             f"<= {t['saving_gap_median_points']:g}"
             f"{_mark(s[f'saving_gap_{what}_median_points'], t['saving_gap_median_points'])}")
            for what in ("cost", "makespan")
        ),
        (f"memory: tasks whose first attempt was over its reservation (of {s['memory_tasks']})",
         _pct(s["share_over_reservation"]),
         f"<= {t['share_over_reservation']:.0%}{_mark(s['share_over_reservation'], t['share_over_reservation'])}"),
        ("memory: retries after a kill for memory (simulated runs)", _num(s.get("memory_retries"), 0), ""),
        ("memory: reservation / peak, median over runs of each run's median", _x(s["median_reservation_over_peak"]),
         f"<= {t['median_reservation_over_peak']:g}x"
         f"{_mark(s['median_reservation_over_peak'], t['median_reservation_over_peak'])}"),
        ("runtime MdAPE, median over families", _pct(s["runtime_mdape_median"]),
         f"<= {t['runtime_mdape_median']:.0%}{_mark(s['runtime_mdape_median'], t['runtime_mdape_median'])}"),
    ]  # fmt: skip
    lines += [
        "",
        f"{s['runs']} runs ({s['failed']} without a plan); median repairs per run {_num(s['repairs_median'])}; "
        f"{s['runs_with_failed_repairs']} runs with a re-plan that failed (the run went on under its plan)"
        + (
            "."
            if s.get("repairs_at_time_limit") is None
            else f"; {s['repairs_at_time_limit']} re-plans used their whole time budget (schedules cut short: "
            "a loaded machine cuts more of them, and repairs worse)."
        ),
        "",
        "| figure | value | target |",
        "|---|---:|---|",
        *(f"| {name} | {value} | {target} |" for name, value, target in rows),
        "",
        "Runtime MdAPE per family (leave one instance out, trained on every other instance; a task whose runtime "
        "the replay's scale clamps is left out): "
        + ", ".join(f"{family} {_pct(value)}" for family, value in s["runtime_mdape_by_family"].items())
        + ".",
    ]
    return "\n".join(lines) + "\n"
