"""Batch job queue names of catalog types (executor/backends/aws/jobs.py): a bad one is named, quoted short."""

from __future__ import annotations

import pytest

from agora_optimizer.executor.backends.aws.jobs import queue_name
from agora_optimizer.executor.jobs.spec import BackendError


@pytest.mark.parametrize(
    ("option", "match"),
    [
        (["q"] * 10_000, r"resource c5\.large: job_queue must be a queue name, got \['q'"),
        ("q" * 50_000 + "\nsecond line", r"resource c5\.large: job queue name 'qqq.*' is not a Batch name"),
    ],
    ids=["list", "long"],
)
def test_a_bad_job_queue_is_named_and_quoted_short_on_one_line(option: object, match: str) -> None:
    with pytest.raises(BackendError, match=match) as caught:
        queue_name("c5.large", {"job_queue": option})
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
