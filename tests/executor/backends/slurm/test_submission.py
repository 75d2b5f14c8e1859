"""The SLURM backend's reading of a catalog type's options (executor/backends/slurm/submission.py)."""

from __future__ import annotations

import pytest

from agora_optimizer.executor.backends.slurm import SlurmBackend
from agora_optimizer.executor.jobs.spec import BackendError


@pytest.mark.parametrize("gres_type", [["a100"] * 10_000, "a100 " * 10_000 + "\nsecond line"], ids=["list", "long"])
def test_a_bad_gres_type_is_named_and_quoted_short_on_one_line(gres_type: object) -> None:
    with pytest.raises(BackendError, match="resource 'gpu': 'gres_type' must be a SLURM GPU type") as caught:
        SlurmBackend()._gres_type("gpu", {"gres_type": gres_type})
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
    assert SlurmBackend()._gres_type("gpu", {"gres_type": "a100"}) == "a100"
