"""``agora optimize --queue-wait-model``: the predicted SLURM queue wait is a release time, not billed boot time."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from tests import spec_checker
from tests.conftest import BUNDLED
from tests.slurm_fixtures import RecordedRun


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
        " price_per_hour_usd: 0.1, count: 1, billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0}\n"
        "  - {name: compute, backend: slurm, partition: compute, vcpus: 2, memory_gib: 8, speed: 1.0,"
        " price_per_hour_usd: 0.2, count: 1, billing: {granularity_s: 1, minimum_s: 0}, boot_s: 5}\n"
    )
    workflow = BUNDLED / "blast-chameleon-small-001.json"
    capsys.readouterr()
    plain = tmp_path / "plain.json"
    assert main(["optimize", str(workflow), "-c", str(catalog), "-o", str(plain), "--objective", "time"]) == 0
    capsys.readouterr()
    delayed = tmp_path / "delayed.json"
    args = ["optimize", str(workflow), "-c", str(catalog), "-o", str(delayed), "--objective", "time", "--json"]
    assert main([*args, "--queue-wait-model", str(model)]) == 0
    captured = capsys.readouterr()
    waits = {m[0]: float(m[1]) for m in re.findall(r"predicted queue wait of (\w+): (\d+) s", captured.err)}
    assert set(waits) == {"debug", "compute"}
    assert max(waits.values()) > 0  # else the test below would prove nothing
    summary = json.loads(captured.out)
    released = summary["release_s"]  # the summary shows the waits as release times, to the second
    assert {name: round(wait_s) for name, wait_s in released.items()} == {n: w for n, w in waits.items() if w > 0}
    plan = json.loads(delayed.read_text())
    boot_s = {"debug": 0.0, "compute": 5.0}
    for assignment in plan["assignments"]:  # released, then booted
        resource = assignment["resource"]
        assert assignment["start_s"] >= released.get(resource, 0.0) + boot_s[resource] - 1e-6
    # the wait is not billed: the plan is checked against the catalog file it names, as it is
    assert spec_checker.check_plan(plan, workflow, catalog) == []
    _, cost = spec_checker.recompute(plan, workflow, catalog)
    assert plan["cost_usd"] == pytest.approx(cost, rel=1e-9)
    assert main(["validate", str(delayed), "-w", str(workflow), "-c", str(catalog)]) == 0
    capsys.readouterr()
    table = [*args[:-1], "--queue-wait-model", str(model), "--time-limit-s", "5"]  # the table, not --json
    assert main(table) == 0
    shown = capsys.readouterr().out
    for name in released:  # the table names each wait as a release, not as boot time
        assert re.search(rf"{name}: released at [\d,]+ s \(predicted queue wait, not billed\)", shown)
    first_plain = min(a["start_s"] for a in json.loads(plain.read_text())["assignments"])
    first_delayed = min(a["start_s"] for a in plan["assignments"])
    assert first_delayed >= first_plain + min(waits.values()) - 0.5
