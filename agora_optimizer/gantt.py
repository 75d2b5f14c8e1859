"""Draw a plan as a Gantt chart: one row per machine, tasks coloured by category."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from agora_optimizer.errors import InputFileError
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import category_of

FORMATS = (".png", ".svg", ".pdf")
MAX_LEGEND = 16


def _machine_key(machine: str) -> tuple[str, int, str]:
    """Sort ``c5.large#10`` after ``c5.large#9``; odd ids sort by their text."""
    match = re.match(r"^(.*)#(\d{1,18})$", machine)
    return (match[1], int(match[2]), "") if match else (machine, 0, machine)


def plain_text(text: str) -> str:
    """Text shown as is: matplotlib would read ``$...$`` as a formula."""
    return text.replace("$", r"\$")


def check_chart_path(path: str | Path) -> Path:
    """The chart's path, refused unless it ends in a format matplotlib writes here."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InputFileError(path, f"unsupported chart format '{path.suffix}'; use one of {', '.join(FORMATS)}")
    return path


def save_figure(fig: Figure, path: Path) -> None:
    """Lay out, write and close ``fig``; a path that cannot be written is a clear error."""
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputFileError(path, f"cannot be written: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def draw_gantt(plan: Plan, out: str | Path, categories: dict[str, str] | None = None) -> None:
    """Write the chart to ``out`` (.png, .svg or .pdf)."""
    out = check_chart_path(out)
    category = {a.task: (categories or {}).get(a.task) or category_of(a.task) for a in plan.assignments}
    machines = sorted({a.machine for a in plan.assignments}, key=_machine_key)
    row = {machine: i for i, machine in enumerate(machines)}
    ranked = [name for name, _ in Counter(category.values()).most_common()]
    palette = plt.get_cmap("tab20")
    colour = {name: palette(i % 20) if i < MAX_LEGEND else (0.6, 0.6, 0.6, 1.0) for i, name in enumerate(ranked)}

    height = min(max(2.5, 0.32 * len(machines) + 1.5), 40)
    fig, ax = plt.subplots(figsize=(12, height))
    for a in plan.assignments:
        ax.barh(
            row[a.machine],
            max(a.end_s - a.start_s, 1e-9),
            left=a.start_s,
            height=0.8,
            color=colour[category[a.task]],
            edgecolor="black",
            linewidth=0.2,
        )
    ax.set_yticks(range(len(machines)), [plain_text(m) for m in machines], fontsize=7 if len(machines) > 30 else 9)
    ax.invert_yaxis()
    ax.set_xlim(left=0.0)
    ax.set_xlabel("time (s)")
    ax.set_title(
        f"{plain_text(plan.workflow)}: makespan {plan.makespan_s:,.1f} s, cost {plan.cost_usd:.4f} USD "
        f"({plan.objective.kind}, {plain_text(plan.solver.method)})"
    )
    handles = [Patch(color=colour[name], label=plain_text(name)) for name in ranked[:MAX_LEGEND]]
    if len(ranked) > MAX_LEGEND:
        handles.append(Patch(color=(0.6, 0.6, 0.6, 1.0), label=f"{len(ranked) - MAX_LEGEND} more"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="category")
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    save_figure(fig, out)
