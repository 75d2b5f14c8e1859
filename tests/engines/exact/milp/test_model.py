"""The MILP's model: every variable and row has a deterministic name that says what it is."""

from __future__ import annotations

import dataclasses
import re

from pulp import LpVariable

from agora_optimizer.engines.exact.milp.data import build_data
from agora_optimizer.engines.exact.milp.model import MilpModel, build_model
from agora_optimizer.model import GIB, Billing, Catalog, Edge, Objective, Resource, Task, Workflow
from agora_optimizer.planning.problem import Problem


def fan_out() -> Problem:
    """A root and three 2-core, 3 GiB leaves: on "duo" (2 vcpus, 4 GiB, one machine at once) two leaves
    overlap in lanes and memory, and the cost objective orders its slots by lease start (count rows)."""
    duo = Resource("duo", "aws", 2, 4, 1.0, 0.1, 1, Billing(1.0, 0.0), 0.0)
    quad = Resource("quad", "aws", 4, 8, 1.0, 0.5, None, Billing(1.0, 0.0), 0.0)
    tasks = [Task("root", 2.0, 1, GIB, "t"), *(Task(f"leaf{n}", 4.0, 2, 3 * GIB, "t") for n in range(3))]
    edges = [Edge("root", f"leaf{n}", 1_000_000) for n in range(3)]
    workflow = Workflow.create("fan-out", tasks, edges)
    return Problem.create(workflow, Catalog((duo, quad), 1e6), Objective(kind="cost"))


def variables_by_field(model: MilpModel) -> dict[str, list[tuple[tuple[int, ...], LpVariable]]]:
    """The model's solver variables by the field that holds them, each with its indices."""
    found: dict[str, list[tuple[tuple[int, ...], LpVariable]]] = {}
    for field in dataclasses.fields(model):
        value = getattr(model, field.name)
        if isinstance(value, LpVariable):
            found[field.name] = [((), value)]
        elif isinstance(value, list):
            found[field.name] = [((i,), var) for i, var in enumerate(value)]
        elif isinstance(value, dict) and field.name != "cost":  # the cost is an expression (a dict of terms)
            found[field.name] = [(key, var) for key, var in value.items()]
    return found


def test_each_variable_is_named_for_its_field_and_indices_and_each_name_is_used_once() -> None:
    model = build_model(build_data(fan_out(), []))
    by_field = variables_by_field(model)
    assert all(by_field.values()), {name: len(items) for name, items in by_field.items()}  # every kind is there
    for name, items in by_field.items():
        assert name == "x" or re.fullmatch(r"[a-z]{3,}(_[a-z]+)*", name), f"'{name}' says nothing"
        for key, var in items:
            assert var.name == "_".join([name, *map(str, key)])
    variables = [var.name for var in model.lp.variables()]
    assert len(variables) == sum(len(items) for items in by_field.values())  # no variable outside the fields
    assert len(set(variables)) == len(variables)
    rows = [row.name for row in model.lp.constraints()]
    assert not set(rows) & set(variables)  # a row never takes a variable's name


def test_the_names_are_the_same_from_one_build_to_the_next() -> None:
    first, second = (build_model(build_data(fan_out(), [])) for _ in range(2))
    assert [v.name for v in first.lp.variables()] == [v.name for v in second.lp.variables()]
    assert [row.name for row in first.lp.constraints()] == [row.name for row in second.lp.constraints()]
