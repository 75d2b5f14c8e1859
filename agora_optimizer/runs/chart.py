"""Draw a run record as a Gantt chart: per machine, the planned bar over the actual one.

Same look as :mod:`agora_optimizer.gantt` (a plan's chart), so the two read alike: one row per
machine (the planned machine, or where the task really ran when it differs), time in seconds
from the DAG run's start. In each row a task's planned slot is the upper, hatched bar and its
actual run the lower, solid bar, coloured by how the last try ended.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.patches import Patch

from agora_optimizer.gantt import _machine_key, check_chart_path, plain_text, plt, save_figure
from agora_optimizer.runs.record import RunRecord, RunTask

PLANNED_COLOUR = (0.75, 0.78, 0.85, 1.0)
STATE_COLOURS = {"success": (0.30, 0.65, 0.35, 1.0), "not run": (0.6, 0.6, 0.6, 1.0)}
FAILED_COLOUR = (0.85, 0.30, 0.25, 1.0)
BAR_HEIGHT = 0.38


def _actual_row(task: RunTask) -> str:
    return task.actual_machine or task.actual_resource or "(no resource)"


def draw_run_gantt(record: RunRecord, out: str | Path) -> Path:
    """Write the chart to ``out`` (.png, .svg or .pdf); returns the path."""
    out = check_chart_path(out)
    rows = {t.planned_machine for t in record.tasks if t.planned_machine and t.planned_start_s is not None}
    rows |= {_actual_row(t) for t in record.tasks if t.actual_start_s is not None}
    machines = sorted(rows, key=_machine_key)
    index = {machine: i for i, machine in enumerate(machines)}
    fig, ax = plt.subplots(figsize=(12, min(max(2.5, 0.55 * len(machines) + 1.5), 40)))
    for task in record.tasks:
        if task.planned_machine in index and task.planned_start_s is not None and task.planned_end_s is not None:
            width = max(task.planned_end_s - task.planned_start_s, 1e-9)
            y = index[task.planned_machine] - BAR_HEIGHT / 2
            ax.barh(y, width, left=task.planned_start_s, height=BAR_HEIGHT, color=PLANNED_COLOUR,
                    edgecolor="black", linewidth=0.2, hatch="//")  # fmt: skip
        if task.actual_start_s is not None and task.actual_end_s is not None:
            colour = STATE_COLOURS.get(task.state, FAILED_COLOUR)
            width = max(task.actual_end_s - task.actual_start_s, 1e-9)
            y = index[_actual_row(task)] + BAR_HEIGHT / 2
            ax.barh(y, width, left=task.actual_start_s, height=BAR_HEIGHT, color=colour, edgecolor="black",
                    linewidth=0.2)  # fmt: skip
            if len(record.tasks) <= 40:
                ax.text(task.actual_start_s, y, f" {plain_text(task.key)}", va="center", fontsize=7)
    ax.set_yticks(range(len(machines)), [plain_text(m) for m in machines], fontsize=7 if len(machines) > 30 else 9)
    ax.set_ylim(len(machines) - 0.4, -0.6)  # the first machine on top, room for its planned bar
    ax.set_xlim(left=0.0)
    ax.set_xlabel("time from the DAG run's start (s)")
    ax.set_title(plain_text(f"{record.dag_id} {record.run_id}: {_numbers(record)}"), fontsize=10)
    handles = [
        Patch(facecolor=PLANNED_COLOUR, hatch="//", edgecolor="black", label="planned"),
        Patch(color=STATE_COLOURS["success"], label="actual: success"),
        Patch(color=FAILED_COLOUR, label="actual: failed"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    save_figure(fig, out)
    return out


def _numbers(record: RunRecord) -> str:
    actual = "-" if record.actual_makespan_s is None else f"{record.actual_makespan_s:,.1f} s"
    if record.planned_makespan_s is None:
        why = "plan not found" if record.planned else "unplanned"
        return f"makespan {actual}, cost {record.actual_cost_usd:.4f} USD ({why})"
    return (
        f"makespan {actual} (planned {record.planned_makespan_s:,.1f} s), "
        f"cost {record.actual_cost_usd:.4f} USD (planned {record.planned_cost_usd or 0.0:.4f})"
    )
