"""Charts drawn on the server as SVG text: the plan's Gantt chart and the cost/makespan Pareto front.

Hand-written SVG, no plotting library: a page of a 5,000-task plan draws in milliseconds.
Every name (task, machine, resource, DAG) goes through :func:`esc`, so a name such as
``<script>`` is text, never markup. The Gantt chart shows one row per machine, a page of
machines at a time, tasks coloured by resource type; tasks closer together than a pixel are
drawn as one bar ("N tasks"), so a lane never holds more bars than it has pixels. Tasks that share a machine at the same
time (a machine with several cores) get a lane each within the machine's row. A run record's chart
(:func:`run_gantt_svg`) draws the same rows twice over: the planned slots (hatched) above the actual runs.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape

from agora_optimizer.model.plan import Assignment
from agora_optimizer.runs.record import RunRecord

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#1f77b4",
    "#8c564b",
)
MACHINES_PER_PAGE = 40
MERGE_GAP_PX = 1.0
LANE_PX = 14
ROW_GAP_PX = 4
FONT = 'font-family="sans-serif" font-size="11"'
Scale = Callable[[float], float]


def esc(text: object) -> str:
    """Text for an SVG or HTML text node or attribute value."""
    return escape(str(text), quote=True)


def short(text: str, limit: int = 26) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def machine_key(machine: str) -> tuple[str, int, str]:
    """Sort ``c5.large#10`` after ``c5.large#9``; other names by their text."""
    match = re.match(r"^(.*)#(\d{1,18})$", machine)
    return (match[1], int(match[2]), "") if match else (machine, 0, machine)


def resource_colours(resources: Iterable[str]) -> dict[str, str]:
    """A colour per resource type, stable for a plan (by name)."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(resources)))}


def nice_step(span: float, count: int) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) that cuts ``span`` in at most ``count`` parts."""
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-12))


def nice_ticks(high: float, count: int = 6) -> list[float]:
    """Round tick values from 0 to at most ``high``."""
    if high <= 0:
        return [0.0]
    step = nice_step(high, count)
    return [i * step for i in range(int(high / step + 1e-9) + 1)]


def axis(low: float, high: float, count: int = 5) -> tuple[float, float, list[float]]:
    """Round bounds a little outside [low, high] (not below 0 for positive data), and the ticks between them."""
    pad = (high - low) * 0.05 or abs(high) * 0.1 or 1.0
    step = nice_step(high - low + 2 * pad, count)
    start = math.floor((low - pad) / step) * step
    if low >= 0:
        start = max(start, 0.0)
    stop = math.ceil((high + pad) / step) * step
    return start, stop, [start + i * step for i in range(round((stop - start) / step) + 1)]


def label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


@dataclass(frozen=True)
class GanttPage:
    svg: str
    page: int
    pages: int
    machines: int


@dataclass(frozen=True)
class _Paged:
    """The machines of a chart, ``per_page`` a page, and the page shown (the one asked for, within those there are)."""

    machines: Sequence[str]
    page: int
    pages: int
    first: int  # the index of the page's first machine
    shown: Sequence[str]

    @classmethod
    def of(cls, machines: Sequence[str], page: int, per_page: int) -> _Paged:
        pages = max(1, math.ceil(len(machines) / per_page))
        page = min(max(page, 0), pages - 1)
        first = page * per_page
        return cls(machines, page, pages, first, machines[first : first + per_page])

    def chart(self, svg_id: str, title: str, width_px: int, height: int, parts: Sequence[str]) -> GanttPage:
        """The page as an SVG of that size: ``parts`` under ``title`` and the range of machines shown."""
        return GanttPage(
            "".join(
                [
                    f'<svg xmlns="http://www.w3.org/2000/svg" id="{svg_id}" class="chart gantt" role="img" '
                    f'width="{width_px}" height="{height}" viewBox="0 0 {width_px} {height}" {FONT}>',
                    f"<title>{title} (machines {self.first + 1}-{self.first + len(self.shown)})</title>",
                    *parts,
                    "</svg>",
                ]
            ),
            self.page,
            self.pages,
            len(self.machines),
        )


@dataclass
class _Bar:
    start_px: float
    end_px: float
    first: Assignment
    last_end_s: float
    tasks: int = 1


def gantt_svg(
    assignments: Sequence[Assignment], page: int = 0, per_page: int = MACHINES_PER_PAGE, width_px: int = 960
) -> GanttPage:
    """One page of machines of the plan, tasks coloured by resource type, with a time axis and a legend.

    A machine with several cores runs tasks side by side: each gets a lane of the machine's row.
    """
    machines = sorted({a.machine for a in assignments}, key=machine_key)
    paged = _Paged.of(machines, page, per_page)
    by_machine: dict[str, list[Assignment]] = {machine: [] for machine in paged.shown}
    for a in assignments:
        if a.machine in by_machine:
            by_machine[a.machine].append(a)
    lanes = {machine: _lanes(tasks) for machine, tasks in by_machine.items()}
    colours = resource_colours(a.resource for a in assignments)
    span_s = max((a.end_s for a in assignments), default=0.0) or 1.0
    left, right = 180, 20
    legend, legend_h = _legend(colours, left, width_px - right)
    plot_w = width_px - left - right
    y = legend_h + 8
    rows = []
    for machine in paged.shown:
        rows.append(_machine_row(machine, lanes[machine], y, left, plot_w / span_s, colours))
        y += LANE_PX * max(len(lanes[machine]), 1) + ROW_GAP_PX
    title = f"Gantt chart: {len(assignments)} tasks on {len(machines)} machines"
    return paged.chart("gantt", title, width_px, y + 34, [legend, *rows, _time_axis(left, plot_w, span_s, y)])


def _lanes(tasks: Sequence[Assignment]) -> list[list[Assignment]]:
    """The tasks in as few lanes as their overlaps need, each lane in start order (interval partitioning)."""
    lanes: list[list[Assignment]] = []
    free: list[tuple[float, int]] = []  # (end of the lane's last task, lane)
    for a in sorted(tasks, key=lambda a: (a.start_s, a.end_s)):
        if free and free[0][0] <= a.start_s + 1e-9:
            _, lane = heapq.heappop(free)
        else:
            lane = len(lanes)
            lanes.append([])
        lanes[lane].append(a)
        heapq.heappush(free, (a.end_s, lane))
    return lanes


def _machine_row(
    machine: str, lanes: list[list[Assignment]], y: float, left: float, px_per_s: float, colours: dict[str, str]
) -> str:
    height = LANE_PX * max(len(lanes), 1)
    parts = [
        f'<text x="{left - 6}" y="{y + height / 2 + 4:.0f}" text-anchor="end" class="machine">'
        f"{esc(short(machine))}<title>{esc(machine)}</title></text>"
    ]
    for i, lane in enumerate(lanes):
        parts += [_bar_svg(bar, y + i * LANE_PX, colours) for bar in _bars(lane, left, px_per_s)]
    return "".join(parts)


def _bars(ordered: Sequence[Assignment], left: float, px_per_s: float) -> list[_Bar]:
    """A lane's tasks as bars, those less than a pixel apart merged."""
    bars: list[_Bar] = []
    for a in ordered:
        start_px, end_px = left + a.start_s * px_per_s, left + a.end_s * px_per_s
        if bars and start_px - bars[-1].end_px < MERGE_GAP_PX:
            last = bars[-1]
            last.end_px = max(last.end_px, end_px)
            last.last_end_s = max(last.last_end_s, a.end_s)
            last.tasks += 1
        else:
            bars.append(_Bar(start_px, end_px, a, a.end_s))
    return bars


def _bar_title(bar: _Bar) -> str:
    """What a bar holds (a task, or the tasks merged into it), where and when: its tooltip."""
    a = bar.first
    what = esc(a.task) if bar.tasks == 1 else f"{bar.tasks} tasks from {esc(a.task)}"
    return f"{what} on {esc(a.machine)} ({esc(a.resource)}): {a.start_s:,.1f}-{bar.last_end_s:,.1f} s"


def _bar_svg(bar: _Bar, y: float, colours: dict[str, str]) -> str:
    width = max(bar.end_px - bar.start_px, 0.8)
    return (
        f'<rect class="task" x="{bar.start_px:.1f}" y="{y + 1}" width="{width:.1f}" height="{LANE_PX - 2}" '
        f'fill="{colours[bar.first.resource]}" stroke="#333" stroke-width="0.3"><title>{_bar_title(bar)}</title></rect>'
    )


def _legend(colours: dict[str, str], left: float, right: float) -> tuple[str, int]:
    parts, x, y = [], left, 4
    for name, colour in colours.items():
        text = short(name, 30)
        item_w = 22 + 6.5 * len(text)
        if x + item_w > right and x > left:
            x, y = left, y + 16
        parts.append(
            f'<rect x="{x:.0f}" y="{y}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 16:.0f}" y="{y + 10}">{esc(text)}</text>'
        )
        x += item_w + 10
    return f'<g class="legend">{"".join(parts)}</g>', y + 16


def _time_axis(left: float, plot_w: float, span_s: float, y: float) -> str:
    parts = [f'<line x1="{left}" y1="{y}" x2="{left + plot_w}" y2="{y}" stroke="#333"/>']
    for tick in nice_ticks(span_s):
        x = left + plot_w * tick / span_s
        parts.append(
            f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{label(tick)}</text>'
        )
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{y + 29}" text-anchor="middle">time (s)</text>')
    return "".join(parts)


PLANNED_FILL = "url(#planned-hatch)"
STATE_FILLS = {"success": "#59a14f", "not run": "#bab0ac"}
FAILED_FILL = "#e15759"
HATCH = (
    '<defs><pattern id="planned-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#d5dbe8"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#7f8aa3" stroke-width="2"/></pattern></defs>'
)


def run_gantt_svg(
    record: RunRecord, page: int = 0, per_page: int = MACHINES_PER_PAGE, width_px: int = 960
) -> GanttPage:
    """One page of the run's machines: per machine, the planned slots (hatched) over the actual runs.

    A task's planned bar is in its planned machine's row, its actual bar in the row of the machine it
    really ran on (or its resource type, for an attempt on no planned machine), as in ``agora runs show
    --chart``. Actual bars are green for success, red for any other end.
    """
    planned: dict[str, list[Assignment]] = {}
    actual: dict[str, list[Assignment]] = {}
    states: dict[str, str] = {}
    for t in record.tasks:
        states[t.key] = t.state
        if t.planned_machine and t.planned_start_s is not None and t.planned_end_s is not None:
            bar = Assignment(t.key, t.planned_resource, t.planned_machine, t.planned_start_s, t.planned_end_s, 1, 0)
            planned.setdefault(t.planned_machine, []).append(bar)
        if t.actual_start_s is not None and t.actual_end_s is not None:
            where = t.actual_machine or t.actual_resource or "(no resource)"
            end_s = max(t.actual_end_s, t.actual_start_s)
            bar = Assignment(t.key, t.actual_resource or "?", where, t.actual_start_s, end_s, 1, 0)
            actual.setdefault(where, []).append(bar)
    machines = sorted(planned.keys() | actual.keys(), key=machine_key)
    paged = _Paged.of(machines, page, per_page)
    every = [a for bars in (*planned.values(), *actual.values()) for a in bars]
    span_s = max((a.end_s for a in every), default=0.0) or 1.0
    left, right = 230, 20
    plot_w = width_px - left - right
    legend = _run_legend(left)
    y = 28.0
    rows = []
    for machine in paged.shown:
        lanes = [("planned", lane) for lane in _lanes(planned.get(machine, []))] or [("planned", [])]
        lanes += [("actual", lane) for lane in _lanes(actual.get(machine, []))] or [("actual", [])]
        rows.append(_run_row(machine, lanes, y, left, plot_w / span_s, states))
        y += LANE_PX * len(lanes) + ROW_GAP_PX * 2
    title = f"Plan vs actual of run {esc(record.run_id)}: {len(record.tasks)} tasks on {len(machines)} machines"
    return paged.chart(
        "run-gantt", title, width_px, int(y) + 34, [HATCH, legend, *rows, _time_axis(left, plot_w, span_s, y)]
    )


def _run_row(
    machine: str,
    lanes: list[tuple[str, list[Assignment]]],
    y: float,
    left: float,
    px_per_s: float,
    states: dict[str, str],
) -> str:
    height = LANE_PX * len(lanes)
    parts = [
        f'<g class="machine-row" data-machine="{esc(machine)}">',
        f'<line x1="8" y1="{y - ROW_GAP_PX:.0f}" x2="{left}" y2="{y - ROW_GAP_PX:.0f}" stroke="#e2e8f0"/>',
        f'<text x="{left - 60}" y="{y + height / 2 + 4:.0f}" text-anchor="end" class="machine">'
        f"{esc(short(machine))}<title>{esc(machine)}</title></text>",
    ]
    for i, (kind, lane) in enumerate(lanes):
        lane_y = y + i * LANE_PX
        if i == 0 or lanes[i - 1][0] != kind:
            parts.append(f'<text x="{left - 6}" y="{lane_y + 10:.0f}" text-anchor="end" fill="#718096">{kind}</text>')
        for bar in _bars(lane, left, px_per_s):
            fill = PLANNED_FILL if kind == "planned" else STATE_FILLS.get(states[bar.first.task], FAILED_FILL)
            parts.append(_run_bar_svg(bar, lane_y, kind, fill))
    parts.append("</g>")
    return "".join(parts)


def _run_bar_svg(bar: _Bar, y: float, kind: str, fill: str) -> str:
    width = max(bar.end_px - bar.start_px, 0.8)
    return (
        f'<rect class="{kind}" data-task="{esc(bar.first.task)}" data-tasks="{bar.tasks}" '
        f'x="{bar.start_px:.1f}" y="{y + 1}" width="{width:.1f}" height="{LANE_PX - 2}" fill="{fill}" '
        f'stroke="#333" stroke-width="0.3"><title>{kind}: {_bar_title(bar)}</title></rect>'
    )


def _run_legend(left: float) -> str:
    items = (("planned", PLANNED_FILL), ("actual: success", STATE_FILLS["success"]), ("actual: failed", FAILED_FILL))
    parts, x = [], left
    for name, fill in items:
        parts.append(
            f'<rect x="{x:.0f}" y="4" width="12" height="12" fill="{fill}" stroke="#333" stroke-width="0.3"/>'
            f'<text x="{x + 16:.0f}" y="14">{name}</text>'
        )
        x += 22 + 6.5 * len(name) + 10
    return f'<g class="legend">{"".join(parts)}</g>'


@dataclass(frozen=True)
class PlotPoint:
    makespan_s: float
    cost_usd: float
    label: str


def pareto_svg(
    front: Sequence[PlotPoint],
    chosen: PlotPoint,
    default: PlotPoint | None = None,
    lower_bound: PlotPoint | None = None,
    title: str = "",
    width_px: int = 640,
    height_px: int = 400,
) -> str:
    """The front as a step line, the chosen plan as a diamond, the one-type default as a square."""
    left, right, top, bottom = 80, 170, 28, 48
    everything = [*front, chosen, *([default] if default else []), *([lower_bound] if lower_bound else [])]
    x_low, x_high, x_ticks = axis(min(p.makespan_s for p in everything), max(p.makespan_s for p in everything))
    y_low, y_high, y_ticks = axis(min(p.cost_usd for p in everything), max(p.cost_usd for p in everything))
    plot_w, plot_h = width_px - left - right, height_px - top - bottom

    def x(value: float) -> float:
        return left + plot_w * (value - x_low) / (x_high - x_low)

    def y(value: float) -> float:
        return top + plot_h * (1 - (value - y_low) / (y_high - y_low))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="pareto-plot" class="chart pareto" role="img" '
        f'width="{width_px}" height="{height_px}" viewBox="0 0 {width_px} {height_px}" {FONT}>',
        f"<title>Cost / makespan Pareto front{': ' + esc(title) if title else ''}</title>",
        _axes(left, top, plot_w, plot_h, [(x(v), v) for v in x_ticks], [(y(v), v) for v in y_ticks]),
    ]
    if lower_bound is not None:
        parts.append(
            f'<line x1="{x(lower_bound.makespan_s):.1f}" y1="{top}" x2="{x(lower_bound.makespan_s):.1f}" '
            f'y2="{top + plot_h}" stroke="#888" stroke-dasharray="3 3"/>'
            f'<line x1="{left}" y1="{y(lower_bound.cost_usd):.1f}" x2="{left + plot_w}" '
            f'y2="{y(lower_bound.cost_usd):.1f}" stroke="#888" stroke-dasharray="3 3"/>'
        )
    ordered = sorted(front, key=lambda p: p.makespan_s)
    if ordered:
        steps = [f"M{x(ordered[0].makespan_s):.1f},{y(ordered[0].cost_usd):.1f}"]
        steps += [f"H{x(point.makespan_s):.1f}V{y(point.cost_usd):.1f}" for point in ordered[1:]]
        parts.append(f'<path class="front" d="{"".join(steps)}" fill="none" stroke="#4e79a7" stroke-width="1.5"/>')
    for point in ordered:
        parts.append(_marker("circle", point, x, y, "#4e79a7", "front-point"))
    if default is not None:
        parts.append(_marker("square", default, x, y, "#e15759", "default-point"))
    parts.append(_marker("diamond", chosen, x, y, "#f28e2b", "chosen-point"))
    parts.append(_plot_legend(left + plot_w + 16, top, default is not None, lower_bound is not None))
    parts.append("</svg>")
    return "".join(parts)


def _axes(
    left: float, top: float, w: float, h: float, x_ticks: list[tuple[float, float]], y_ticks: list[tuple[float, float]]
) -> str:
    """The frame, the ticks (pixel, value) and the axis titles."""
    parts = [f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#333"/>']
    parts += [
        f'<text x="{px:.1f}" y="{top + h + 15}" text-anchor="middle">{label(value)}</text>' for px, value in x_ticks
    ]
    parts += [f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{label(value)}</text>' for py, value in y_ticks]
    parts.append(f'<text x="{left + w / 2:.0f}" y="{top + h + 34}" text-anchor="middle">makespan (s)</text>')
    parts.append(
        f'<text x="16" y="{top + h / 2:.0f}" text-anchor="middle" transform="rotate(-90 16 {top + h / 2:.0f})">'
        "cost (USD)</text>"
    )
    return "".join(parts)


def _marker(shape: str, point: PlotPoint, x: Scale, y: Scale, colour: str, css: str) -> str:
    px, py = x(point.makespan_s), y(point.cost_usd)
    title = f"<title>{esc(point.label)}: makespan {point.makespan_s:,.1f} s, cost {point.cost_usd:,.4f} USD</title>"
    if shape == "circle":
        body = f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4"'
    elif shape == "square":
        body = f'<rect x="{px - 5:.1f}" y="{py - 5:.1f}" width="10" height="10"'
    else:
        body = f'<path d="M{px:.1f},{py - 8:.1f}L{px + 8:.1f},{py:.1f}L{px:.1f},{py + 8:.1f}L{px - 8:.1f},{py:.1f}Z"'
    return f'{body} class="{css}" fill="{colour}" stroke="#222">{title}</{body.split()[0][1:]}>'


def _plot_legend(x: float, y: float, with_default: bool, with_bounds: bool) -> str:
    items = [("#4e79a7", "Pareto front"), ("#f28e2b", "current plan")]
    if with_default:
        items.append(("#e15759", "one-type default"))
    if with_bounds:
        items.append(("#888", "lower bounds"))
    return "".join(
        f'<rect x="{x}" y="{y + 18 * i}" width="12" height="12" fill="{colour}"/>'
        f'<text x="{x + 18}" y="{y + 18 * i + 10}">{name}</text>'
        for i, (colour, name) in enumerate(items)
    )
