"""The backends one executor uses (executor/backend_set.py): those made at its start, else each made once, from the
registry, at its first use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backend_set import BackendSet
from agora_optimizer.model.catalog import Resource

POOL = Resource("pool_small", "celery", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=0.0)
LOCAL = Resource("local-small", "local", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=0.0)


def test_a_backend_is_made_at_its_first_use_for_its_kinds_resources_and_kept() -> None:
    made: list[tuple[str, list[str]]] = []

    def make(name: str, resources: Mapping[str, Resource]) -> Any:
        made.append((name, sorted(resources)))
        return object()  # what it makes is the registry's business: any backend

    backends = BackendSet({"pool_small": POOL, "local-small": LOCAL}, make=make)
    assert backends.made() == {}
    first = backends.get("local")
    assert backends.get("local") is first and made == [("local", ["local-small", "pool_small"])]
    other: Any = object()
    backends.use("local", other)  # a backend made elsewhere takes its place
    assert backends.get("local") is other and backends.made() == {"local": other}


def test_the_backends_made_at_start_are_used_and_none_is_made_again() -> None:
    made: list[str] = []
    at_start: Any = object()
    backends = BackendSet({"local-small": LOCAL}, {"local": at_start}, make=lambda name, _: made.append(name))
    assert backends.get("local") is at_start and backends.made() == {"local": at_start} and made == []


def test_a_backend_the_registry_does_not_know_is_an_error_naming_it() -> None:
    with pytest.raises(AgoraError, match=r"unknown backend 'gpu-farm' \(registered: .*local"):
        BackendSet({}).get("gpu-farm")
