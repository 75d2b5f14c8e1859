"""The ``[agora]`` settings (settings.py): the catalog setting read as one catalog, in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from tests.conftest import CATALOGS, resource, write_yaml

pytestmark = pytest.mark.airflow  # settings are read through Airflow's configuration


def test_the_catalog_setting_is_read_as_one_catalog_of_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    files = f"{CATALOGS / 'local.yaml'},{CATALOGS / 'celery-loopback.yaml'}"
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", files)
    catalog = settings.configured_catalog()
    assert catalog.source == files
    assert {r.backend for r in catalog.resources} == {"local", "celery"}
    assert settings.configured_catalog(required=True) is catalog  # read once per value of the setting


def test_a_changed_setting_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b"):
        path = write_yaml(
            tmp_path / f"{name}.yaml", {"network": {"bandwidth_bytes_per_s": 1e9}, "resources": [resource(name)]}
        )
        monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(path))
        assert list(settings.configured_catalog().by_name) == [name]


def test_an_empty_catalog_setting_is_an_empty_catalog_unless_one_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", " , ")
    assert settings.configured_catalog().resources == ()
    with pytest.raises(AgoraError, match=r"^\[agora\] catalog is empty: name the catalog files of your resources$"):
        settings.configured_catalog(required=True)
