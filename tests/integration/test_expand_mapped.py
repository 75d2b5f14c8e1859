"""A DAG's mapped tasks expanded into their planned instances (integration/airflow_dag.expand_mapped): no Airflow."""

from __future__ import annotations

from agora_optimizer.integration.airflow_dag import expand_mapped
from agora_optimizer.integration.dag_shape import DagShape, DagTask
from agora_optimizer.predict.map_width import MapWidth


def test_instances_follow_every_instance_of_a_mapped_parent_and_their_twin_in_a_mapped_group() -> None:
    shape = DagShape(
        "d",
        "d.py",
        (
            DagTask("start", "Empty", ()),
            DagTask("add", "Python", ("start",), mapped=True),
            DagTask("sum", "Python", ("add",)),
            DagTask("g.scale", "Python", ("start",), mapped=True, map_group="g"),
            DagTask("g.report", "Python", ("g.scale",), mapped=True, map_group="g", category="reporting"),
        ),
    )
    widths = {"add": MapWidth(3, "default"), "g.scale": MapWidth(2, "literal"), "g.report": MapWidth(2, "literal")}
    tasks = {task.task_id: task for task in expand_mapped(shape, widths).tasks}
    assert list(tasks) == [
        "start",
        "add[0]",
        "add[1]",
        "add[2]",
        "sum",
        "g.scale[0]",
        "g.scale[1]",
        "g.report[0]",
        "g.report[1]",
    ]
    assert tasks["add[1]"].upstream == ("start",) and tasks["add[1]"].category == "add"
    assert tasks["sum"].upstream == ("add[0]", "add[1]", "add[2]")
    assert tasks["g.report[1]"].upstream == ("g.scale[1]",)
    assert tasks["g.report[0]"].category == "reporting"  # a declared category stays
    assert tasks["start"].category == ""


def test_a_dag_without_mapped_tasks_is_unchanged() -> None:
    shape = DagShape("d", "d.py", (DagTask("a", "Empty", ()), DagTask("b", "Empty", ("a",))))
    assert expand_mapped(shape, {}) == shape


def test_each_planned_instance_reaches_the_predictor_with_its_index_and_its_tasks_planned_width() -> None:
    from agora_optimizer.integration.airflow_dag import workflow_shape
    from agora_optimizer.predict.features import feature_frame

    shape = DagShape("d", "d.py", (DagTask("start", "Empty", ()), DagTask("add", "Python", ("start",), mapped=True)))
    expanded = workflow_shape(expand_mapped(shape, {"add": MapWidth(3, "history", median=2.0, runs=4)}))
    assert [(t.task_id, t.map_index, t.map_width) for t in expanded.tasks] == [
        ("start", -1, 1),
        ("add[0]", 0, 3),
        ("add[1]", 1, 3),
        ("add[2]", 2, 3),
    ]
    frame = feature_frame(expanded.tasks)
    assert frame["map_index"].tolist() == [-1.0, 0.0, 1.0, 2.0] and frame["map_width"].tolist() == [1.0, 3.0, 3.0, 3.0]
