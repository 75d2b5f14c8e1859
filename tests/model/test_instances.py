import pytest

from agora_optimizer.model.instances import instance_id, split_instance


@pytest.mark.parametrize(
    ("task_id", "map_index", "name"),
    [("load", 3, "load[3]"), ("load", 0, "load[0]"), ("load", -1, "load"), ("group.add[1]", 2, "group.add[1][2]")],
)
def test_an_instance_name_splits_back_into_its_task_and_index(task_id, map_index, name):
    assert instance_id(task_id, map_index) == name
    assert split_instance(name) == (task_id, map_index)


@pytest.mark.parametrize("name", ["load", "load[]", "load[x]", "load[01]", "[3]", "load[3]x"])
def test_a_name_that_is_not_an_instance_is_its_own_task(name):
    assert split_instance(name) == (name, -1)
