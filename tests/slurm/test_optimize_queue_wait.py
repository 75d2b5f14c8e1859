"""``agora optimize --queue-wait-model``: the predicted SLURM queue wait delays where plans start."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from tests.conftest import BUNDLED
from tests.slurm.conftest import RecordedRun


def test_the_predicted_wait_delays_every_slurm_start(
    recorded_run: RecordedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "waits.db"
    shutil.copy(recorded_run.store_url.removeprefix("sqlite:///"), store)
    model = tmp_path / "model"
    assert main(["queue", "train", "--store", f"sqlite:///{store}", "--out", str(model), "--min-samples", "8"]) == 0
    catalog = tmp_path / "loopback.yaml"
    catalog.write_text(
        "network: {bandwidth_bytes_per_s: 1.0e9}\n"
        "resources:\n"
        "  - {name: debug, backend: slurm, partition: debug, vcpus: 1, memory_gib: 4, speed: 1.0,"
        " price_per_hour_usd: 0.1, count: 1}\n"
        "  - {name: compute, backend: slurm, partition: compute, vcpus: 2, memory_gib: 8, speed: 1.0,"
        " price_per_hour_usd: 0.2, count: 1}\n"
    )
    workflow = BUNDLED / "blast-chameleon-small-001.json"
    capsys.readouterr()
    plain = tmp_path / "plain.json"
    assert main(["optimize", str(workflow), "-c", str(catalog), "-o", str(plain), "--objective", "time"]) == 0
    capsys.readouterr()
    delayed = tmp_path / "delayed.json"
    args = ["optimize", str(workflow), "-c", str(catalog), "-o", str(delayed), "--objective", "time", "--json"]
    assert main([*args, "--queue-wait-model", str(model)]) == 0
    err = capsys.readouterr().err
    waits = {m[0]: float(m[1]) for m in re.findall(r"predicted queue wait of (\w+): (\d+) s", err)}
    assert set(waits) == {"debug", "compute"}
    assert max(waits.values()) > 0  # else the test below would prove nothing
    plan = json.loads(delayed.read_text())
    for assignment in plan["assignments"]:
        assert assignment["start_s"] >= waits[assignment["resource"]] - 0.5  # the message rounds to 1 s
    first_plain = min(a["start_s"] for a in json.loads(plain.read_text())["assignments"])
    first_delayed = min(a["start_s"] for a in plan["assignments"])
    assert first_delayed >= first_plain + min(waits.values()) - 0.5
