"""The repo's copy of the plan contract (docs/spec/agora-model.md) is the shared page, byte for byte."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

COPY = REPO / "docs" / "spec" / "agora-model.md"
SHARED = REPO.parent / "shared" / "spec" / "agora-model.md"


def test_the_spec_copy_is_identical_to_the_shared_page() -> None:
    if not SHARED.exists():  # a clone without shared/ beside it (CI has it)
        pytest.skip(f"{SHARED} is absent")
    assert COPY.read_bytes() == SHARED.read_bytes(), f"{COPY} differs from {SHARED}: copy it again"
