"""The SLURM backend's reading of a catalog type's options (executor/backends/slurm/client.py)."""

from __future__ import annotations

import pytest

from agora_optimizer.executor.backends.slurm.client import gres_type
from agora_optimizer.executor.jobs.spec import BackendError


@pytest.mark.parametrize("value", [["a100"] * 10_000, "a100 " * 10_000 + "\nsecond line"], ids=["list", "long"])
def test_a_bad_gres_type_is_named_and_quoted_short_on_one_line(value: object) -> None:
    with pytest.raises(BackendError, match="resource 'gpu': 'gres_type' must be a SLURM GPU type") as caught:
        gres_type("gpu", {"gres_type": value})
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
    assert gres_type("gpu", {"gres_type": "a100"}) == "a100"
