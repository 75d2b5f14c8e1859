"""Fixtures of the predictor's tests: real bundled instances and one predictor trained on them once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.wfformat_import import attempts_from_wfformat
from tests.conftest import AWS_CATALOG, BUNDLED

BLAST_1 = BUNDLED / "blast-chameleon-small-001.json"
BLAST_2 = BUNDLED / "blast-chameleon-small-002.json"
BLAST_3 = BUNDLED / "blast-chameleon-small-003.json"
SRA_1 = BUNDLED / "srasearch-chameleon-10a-001.json"
SRA_2 = BUNDLED / "srasearch-chameleon-10a-002.json"
GENOME = BUNDLED / "1000genome-chameleon-2ch-100k-001.json"


def stripped(source: Path, target: Path) -> Path:
    """A copy of a WfFormat 1.5 file without any runtimeInSeconds or memoryInBytes."""
    document: dict[str, Any] = json.loads(source.read_text())
    for record in document["workflow"]["execution"]["tasks"]:
        record.pop("runtimeInSeconds", None)
        record.pop("memoryInBytes", None)
    target.write_text(json.dumps(document))
    return target


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(AWS_CATALOG)


@pytest.fixture(scope="session")
def training_attempts() -> list[TaskAttempt]:
    """One run each of blast and srasearch (the second runs are kept for testing)."""
    return attempts_from_wfformat(BLAST_1) + attempts_from_wfformat(SRA_1)


@pytest.fixture(scope="session")
def trained(training_attempts: list[TaskAttempt]) -> Predictor:
    return Predictor().fit(training_attempts)
