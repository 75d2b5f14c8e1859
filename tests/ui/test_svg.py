"""The server-side charts: escaped names, machines a page at a time, sub-pixel tasks merged."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from agora_optimizer.model.plan import Assignment
from agora_optimizer.ui.svg import (
    PlotPoint,
    axis,
    gantt_svg,
    machine_key,
    nice_ticks,
    pareto_svg,
    resource_colours,
)

SVG = "{http://www.w3.org/2000/svg}"
EVIL = '<script>alert("x")</script>&'


def assignment(task: str, machine: str, start: float, end: float, resource: str = "c5.large") -> Assignment:
    return Assignment(task, resource, machine, start, end, 1, 2**30)


def test_gantt_escapes_every_name_and_stays_well_formed_xml() -> None:
    plan = [assignment(EVIL, '"><svg onload=alert(1)>#0', 0, 10, resource="<b>type</b>")]
    svg = gantt_svg(plan).svg
    assert "<script" not in svg and "<b>" not in svg and "onload=alert(1)>" not in svg
    root = ET.fromstring(svg)  # parses: nothing broke out of an attribute or a text node
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    assert any(EVIL in title for title in titles)  # the name is there, as text


def test_gantt_colours_tasks_by_resource_type_and_orders_machines_naturally() -> None:
    plan = [
        assignment("a", "m5.large#10", 0, 5, "m5.large"),
        assignment("b", "m5.large#9", 0, 5, "m5.large"),
        assignment("c", "c5.large#0", 0, 5, "c5.large"),
    ]
    root = ET.fromstring(gantt_svg(plan).svg)
    colours = resource_colours(["m5.large", "c5.large"])
    fills = {rect.findtext(f"{SVG}title", "").split(" ")[0]: rect.get("fill") for rect in root.iter(f"{SVG}rect")}
    assert fills["a"] == fills["b"] == colours["m5.large"] != fills["c"] == colours["c5.large"]
    assert sorted(["m5.large#10", "m5.large#9", "c5.large#0"], key=machine_key) == [
        "c5.large#0",
        "m5.large#9",
        "m5.large#10",
    ]


def test_gantt_pages_machines_and_merges_tasks_closer_than_a_pixel() -> None:
    plan = [assignment(f"t{i}", f"c5.large#{i % 100}", i // 100 * 0.001, i // 100 * 0.001 + 0.001) for i in range(5000)]
    plan.append(assignment("long", "c5.large#0", 0, 1000))
    first, last = gantt_svg(plan, page=0, per_page=40), gantt_svg(plan, page=99, per_page=40)
    assert (first.pages, first.machines, first.page, last.page) == (3, 100, 0, 2)  # a page past the end: the last
    bars = ET.fromstring(first.svg).findall(f".//{SVG}rect[@class='task']")
    assert len(bars) <= 2 * 40  # 50 back-to-back tasks per machine drawn as one bar (and "long" on #0)
    assert any("tasks from" in (bar.findtext(f"{SVG}title") or "") for bar in bars)
    assert len(first.svg) < 60_000


def test_pareto_plot_marks_front_default_and_chosen_plan() -> None:
    front = [PlotPoint(100, 2.0, "time"), PlotPoint(150, 1.0, "cost, deadline 150 s"), PlotPoint(300, 0.5, EVIL)]
    svg = pareto_svg(front, PlotPoint(150, 1.0, "current plan"), PlotPoint(400, 1.5, "one-type default"), title=EVIL)
    root = ET.fromstring(svg)
    assert len(root.findall(f".//{SVG}circle[@class='front-point']")) == 3
    assert len(root.findall(f".//{SVG}path[@class='chosen-point']")) == 1
    assert len(root.findall(f".//{SVG}rect[@class='default-point']")) == 1
    assert "<script" not in svg


def test_pareto_plot_of_a_single_point_has_a_non_empty_range() -> None:
    root = ET.fromstring(pareto_svg([], PlotPoint(10, 0.0, "current plan")))
    assert "nan" not in ET.tostring(root, encoding="unicode")


def test_nice_ticks_cover_the_span_with_round_steps() -> None:
    assert nice_ticks(6834) == [0, 2000, 4000, 6000]
    assert nice_ticks(1.0) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert nice_ticks(0) == [0.0]


def test_gantt_gives_tasks_running_side_by_side_on_a_machine_a_lane_each() -> None:
    plan = [
        assignment("a", "c5.xlarge#0", 0, 10),
        assignment("b", "c5.xlarge#0", 5, 15),
        assignment("c", "c5.xlarge#0", 11, 20),
    ]
    bars = ET.fromstring(gantt_svg(plan).svg).findall(f".//{SVG}rect[@class='task']")
    lane = {bar.findtext(f"{SVG}title", "").split(" ")[0]: bar.get("y") for bar in bars}
    assert lane["a"] == lane["c"] != lane["b"]  # c starts after a ends: in a's lane again


def test_axis_bounds_are_round_and_hold_every_value() -> None:
    low, high, ticks = axis(0.0055, 0.0072)
    assert low <= 0.0055 and high >= 0.0072 and ticks[0] == low and ticks[-1] == pytest.approx(high)
    assert all(len(f"{t:.10f}".rstrip("0")) <= 8 for t in ticks)  # round values: 0.0050, 0.0055, ...
