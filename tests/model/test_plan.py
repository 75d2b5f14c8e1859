"""Machine ids in plans: a machine's type from its id, a type's next unused id, each machine's tasks."""

from agora_optimizer.model.plan import machine_type, tasks_by_machine, unused_machine_id


def test_a_machine_id_names_its_type_before_its_last_hash() -> None:
    assert machine_type("c5.large#3") == "c5.large"
    assert machine_type("odd#name#0") == "odd#name"


def test_the_unused_id_is_the_first_number_free_of_that_type() -> None:
    assert unused_machine_id("c5.large", set()) == "c5.large#0"
    assert unused_machine_id("c5.large", {"c5.large#0", "c5.large#2", "m5.large#1"}) == "c5.large#1"
    assert unused_machine_id("m5.large", {"c5.large#0", "m5.large#0", "m5.large#1"}) == "m5.large#2"
    # another type whose name shares a prefix takes nothing from it
    assert unused_machine_id("c5", ["c5.large#0"]) == "c5#0"


def test_each_machine_lists_its_tasks_in_the_order_given() -> None:
    pairs = [("b", "m#1"), ("a", "m#0"), ("c", "m#1"), ("d", "n#0")]
    assert tasks_by_machine(pairs) == {"m#1": ["b", "c"], "m#0": ["a"], "n#0": ["d"]}
    assert tasks_by_machine([]) == {}
