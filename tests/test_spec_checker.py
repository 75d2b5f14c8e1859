"""Tests of tests/spec_checker.py on tiny hand-built inputs.

The workflow (WfFormat 1.5) has four tasks:

    A (root) --2000 B--> C --300 B--> D
    B (root) -------------500 B-----> D

    task  runtime  coreCount  memoryInBytes
    A     20       1          512 MiB
    B     30       1          256 MiB
    C     40       2          0        (unknown: the plan's value is used)
    D     10       -          -        (default 1 core, unknown memory)

The catalog has ``small`` (2 vcpus, 1 GiB, speed 1, 3.6 $/h = 0.001 $/s, count 1,
billing 10 s granularity / 60 s minimum, boot 5 s) and ``fast`` (4 vcpus, 4 GiB,
speed 2, 7.2 $/h = 0.002 $/s, unlimited, 1 s granularity, no minimum, no boot);
bandwidth 100 B/s, written as the YAML 1.1 string "1.0e2".

Valid plan, derived by hand:
    A small#0 [5, 25)   B small#0 [5, 35)   (2 cores = vcpus, 768 MiB <= 1 GiB)
    C fast#0  [45, 65)  (A end 25 + 2000 B / 100 B/s = 45; 40 / 2 = 20 s)
    D fast#0  [65, 70)  (C same machine: 65; B: 35 + 5 = 40; 10 / 2 = 5 s)
    lease small#0 [0, 35): 35 s -> 40 s by granularity -> 60 s minimum -> 0.06 $
    lease fast#0 [45, 70): 25 s -> 0.05 $
    makespan 70 s, cost 0.11 $
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("spec_checker", _HERE / "spec_checker.py")
sc = importlib.util.module_from_spec(_spec)
sys.modules["spec_checker"] = sc
_spec.loader.exec_module(sc)

MIB = 2**20
GIB = 2**30
WFINSTANCES = Path("/work/shared/data/wfinstances")


# --------------------------------------------------------------------------- fixtures


def _spec_task(tid, parents, children, inputs, outputs):
    return {
        "name": tid,
        "id": tid,
        "parents": parents,
        "children": children,
        "inputFiles": inputs,
        "outputFiles": outputs,
    }


def make_workflow() -> dict:
    files = [
        {"id": "a.in", "sizeInBytes": 100},
        {"id": "a2c.1", "sizeInBytes": 1500},
        {"id": "a2c.2", "sizeInBytes": 500},
        {"id": "a.log", "sizeInBytes": 7000},  # written by A, read by nobody
        {"id": "b2d", "sizeInBytes": 500},
        {"id": "c2d", "sizeInBytes": 300},
        {"id": "ref.db", "sizeInBytes": 9000},  # read by C and D, written by nobody
    ]
    spec_tasks = [
        _spec_task("A", [], ["C"], ["a.in"], ["a2c.1", "a2c.2", "a.log"]),
        _spec_task("B", [], ["D"], [], ["b2d"]),
        _spec_task("C", ["A"], ["D"], ["a2c.1", "a2c.2", "ref.db"], ["c2d"]),
        _spec_task("D", ["B", "C"], [], ["b2d", "c2d", "ref.db"], ["d.out"]),
    ]
    files.append({"id": "d.out", "sizeInBytes": 1})
    exec_tasks = [
        {"id": "A", "runtimeInSeconds": 20, "coreCount": 1, "memoryInBytes": 512 * MIB},
        {
            "id": "B",
            "runtimeInSeconds": 30.0,
            "coreCount": 1,
            "memoryInBytes": 256 * MIB,
        },
        {"id": "C", "runtimeInSeconds": 40, "coreCount": 2, "memoryInBytes": 0},
        {"id": "D", "runtimeInSeconds": 10},
    ]
    return {
        "name": "tiny",
        "description": "hand-built",
        "createdAt": "2026-11-29T12:00:00",
        "schemaVersion": "1.5",
        "author": {"name": "test"},
        "workflow": {
            "specification": {"tasks": spec_tasks, "files": files},
            "execution": {
                "makespanInSeconds": 70,
                "executedAt": "2026-11-29T12:00:00",
                "tasks": exec_tasks,
                "machines": [],
            },
        },
    }


CATALOG_YAML = """\
network: {bandwidth_bytes_per_s: 1.0e2}   # YAML 1.1 reads this as a string
resources:
  - name: small
    backend: local
    vcpus: 2
    memory_gib: 1
    speed: 1.0
    price_per_hour_usd: 3.6
    count: 1
    billing: {granularity_s: 10, minimum_s: 60}
    boot_s: 5
  - name: fast
    backend: aws
    vcpus: 4
    memory_gib: 4
    speed: 2.0
    price_per_hour_usd: 7.2
    count: null
    billing: {granularity_s: 1, minimum_s: 0}
    boot_s: 0
    ami: ami-123      # backend-specific key, ignored
"""


def _a(task, resource, n, start, end, cores, memory):
    return {
        "task": task,
        "resource": resource,
        "machine": f"{resource}#{n}",
        "start_s": start,
        "end_s": end,
        "cores": cores,
        "memory_bytes": memory,
    }


def make_plan() -> dict:
    return {
        "format": "agora-plan/1",
        "workflow": "tiny",
        "catalog": "catalog.yaml",
        "objective": {
            "kind": "balanced",
            "alpha": 0.5,
            "deadline_s": None,
            "budget_usd": None,
        },
        "makespan_s": 70.0,
        "cost_usd": 0.11,
        "assignments": [
            _a("A", "small", 0, 5.0, 25.0, 1, 512 * MIB),
            _a("B", "small", 0, 5.0, 35.0, 1, 256 * MIB),
            _a("C", "fast", 0, 45.0, 65.0, 2, 1 * GIB),
            _a("D", "fast", 0, 65.0, 70.0, 1, 100 * MIB),
        ],
        "solver": {"method": "hand", "status": "feasible", "gap": None, "wall_s": 0.0},
        "created_at": "2026-11-29T12:00:00Z",
    }


@pytest.fixture
def files(tmp_path):
    wf = tmp_path / "tiny.json"
    wf.write_text(json.dumps(make_workflow()))
    cat = tmp_path / "catalog.yaml"
    cat.write_text(CATALOG_YAML)
    return wf, cat


def assignment(plan, task):
    return next(a for a in plan["assignments"] if a["task"] == task)


def rules(violations):
    """The [rule] tags of a list of violation strings."""
    return {v[1 : v.index("]")] for v in violations}


def check(plan, files):
    return sc.check_plan(plan, *files)


# --------------------------------------------------------------------------- valid plans


def test_valid_plan_has_no_violation(files):
    assert check(make_plan(), files) == []


def test_valid_plan_recompute_exact(files):
    makespan, cost = sc.recompute(make_plan(), *files)
    assert makespan == pytest.approx(70.0, abs=1e-12)
    # small#0: 35 s -> 40 s (granularity) -> 60 s (minimum) at 0.001 $/s = 0.06
    # fast#0: 25 s at 0.002 $/s = 0.05
    assert cost == pytest.approx(0.06 + 0.05, abs=1e-12)


def test_json_catalog_equivalent(tmp_path, files):
    wf, _ = files
    cat = tmp_path / "catalog.json"
    doc = yaml.safe_load(CATALOG_YAML)
    doc["network"]["bandwidth_bytes_per_s"] = 100
    cat.write_text(json.dumps(doc))
    assert sc.check_plan(make_plan(), wf, cat) == []


def test_loader_edges_and_defaults(files):
    wf = sc.load_workflow(files[0])
    assert wf.edges == {("A", "C"): 2000.0, ("B", "D"): 500.0, ("C", "D"): 300.0}
    assert wf.tasks["D"].cores == 1 and wf.tasks["D"].memory_bytes is None
    assert wf.tasks["C"].memory_bytes is None  # recorded 0 = unknown
    cat = sc.load_catalog(files[1])
    assert cat.bandwidth_bytes_per_s == 100.0
    assert cat.resources["small"].memory_bytes == GIB and cat.resources["fast"].count is None


def _same_machine_plan() -> dict:
    plan = make_plan()
    plan["assignments"] = [
        _a("A", "small", 0, 5.0, 25.0, 1, 512 * MIB),
        _a("B", "fast", 0, 0.0, 15.0, 1, 256 * MIB),
        _a("C", "small", 0, 25.0, 65.0, 2, 1 * GIB),  # 2 cores and 1 GiB: exactly full
        _a("D", "small", 0, 65.0, 75.0, 1, 100 * MIB),  # B: 15 + 500/100 = 20 <= 65
    ]
    # small#0 [0, 75): 75 s -> 80 s by granularity (above the 60 s minimum) = 0.08
    # fast#0 [0, 15): 15 s = 0.03
    plan["makespan_s"], plan["cost_usd"] = 75.0, 0.11
    return plan


def test_same_machine_needs_no_transfer(files):
    """C starts exactly at A's end on A's machine (a different machine would need +20 s)."""
    plan = _same_machine_plan()
    assert check(plan, files) == []
    assert sc.recompute(plan, *files) == (
        pytest.approx(75.0),
        pytest.approx(0.11, abs=1e-12),
    )


def test_same_placement_on_different_machines_violates_precedence(files):
    plan = make_plan()
    plan["assignments"] = [
        _a("A", "small", 0, 5.0, 25.0, 1, 512 * MIB),
        _a("B", "fast", 0, 0.0, 15.0, 1, 256 * MIB),
        _a("C", "fast", 1, 25.0, 45.0, 2, 1 * GIB),  # needs 25 + 2000/100 = 45
        _a("D", "fast", 1, 45.0, 50.0, 1, 100 * MIB),
    ]
    assert "precedence" in rules(check(plan, files))


def test_zero_length_task_occupies_nothing(tmp_path):
    doc = make_workflow()
    b = doc["workflow"]["execution"]["tasks"][1]
    b["runtimeInSeconds"], b["coreCount"] = 0.0, 2
    wf = tmp_path / "w.json"
    wf.write_text(json.dumps(doc))
    cat = tmp_path / "c.yaml"
    cat.write_text(CATALOG_YAML)
    plan = make_plan()
    assignment(plan, "B").update(start_s=5.0, end_s=5.0, cores=2)  # A (1 core) runs at t=5
    # small#0 lease [0, 25): 25 s -> 30 s -> 60 s minimum: cost unchanged
    assert sc.check_plan(plan, wf, cat) == []


def test_precedence_within_time_tolerance(files):
    plan = make_plan()
    # C starts 0.5 us before its ready time A end 25 + 20 s transfer: within 1e-6 s
    assignment(plan, "C").update(start_s=45.0 - 5e-7, end_s=65.0 - 5e-7)
    assert check(plan, files) == []
    assignment(plan, "C").update(start_s=45.0 - 5e-6, end_s=65.0 - 5e-6)
    plan["cost_usd"] = 0.112  # fast#0 lease is now 25.000005 s -> 26 s billed
    assert rules(check(plan, files)) == {"precedence"}


def test_capacity_overlap_within_time_tolerance(files):
    plan = _same_machine_plan()
    # A overlaps C (1 + 2 cores > 2) for only 0.5 us: not an overlap
    assignment(plan, "A").update(start_s=5.0 + 5e-7, end_s=25.0 + 5e-7)
    assert check(plan, files) == []
    # ... but 5 us is one (and C now starts too early for its parent A)
    assignment(plan, "A").update(start_s=5.0 + 5e-6, end_s=25.0 + 5e-6)
    assert rules(check(plan, files)) == {
        "capacity-cores",
        "capacity-memory",
        "precedence",
    }


# --------------------------------------------------------------------------- mutations


def test_overlap_exceeding_cores(tmp_path):
    doc = make_workflow()
    doc["workflow"]["execution"]["tasks"][1]["coreCount"] = 2  # B now needs 2 cores
    wf = tmp_path / "w.json"
    wf.write_text(json.dumps(doc))
    cat = tmp_path / "c.yaml"
    cat.write_text(CATALOG_YAML)
    plan = make_plan()
    assignment(plan, "B")["cores"] = 2  # A (1) + B (2) = 3 > 2 vcpus on small#0
    violations = sc.check_plan(plan, wf, cat)
    assert rules(violations) == {"capacity-cores"}
    assert "small#0" in violations[0] and "A, B" in violations[0]


def test_overlap_exceeding_memory(files):
    plan = make_plan()
    assignment(plan, "B")["memory_bytes"] = 600 * MIB  # 512 + 600 MiB > 1 GiB
    assert rules(check(plan, files)) == {"capacity-memory"}


def test_memory_over_resource(files):
    plan = make_plan()
    assignment(plan, "A")["memory_bytes"] = 2 * GIB  # small has 1 GiB
    violations = check(plan, files)
    assert "memory" in rules(violations)
    assert any("small memory" in v for v in violations)


def test_memory_below_recorded(files):
    plan = make_plan()
    assignment(plan, "A")["memory_bytes"] = 100 * MIB  # recorded 512 MiB
    assert rules(check(plan, files)) == {"memory"}


def test_cores_must_equal_task_cores(files):
    plan = make_plan()
    assignment(plan, "C")["cores"] = 1  # the workflow says 2
    assert rules(check(plan, files)) == {"cores"}


def test_child_before_parent_end_plus_transfer(files):
    plan = make_plan()
    # C on fast#0 at 35: after A's end (25) but before A's end + 2000/100 s (45)
    assignment(plan, "C").update(start_s=35.0, end_s=55.0)
    # fast#0 lease is now [35, 70) = 35 s -> 0.07; total 0.13
    plan["cost_usd"] = 0.13
    violations = check(plan, files)
    assert rules(violations) == {"precedence"}
    assert "C starts" in violations[0] and "parent A" in violations[0]


def test_too_many_machines_of_a_type(files):
    plan = make_plan()
    assignment(plan, "B")["machine"] = "small#1"  # small#0 and small#1 leased at once
    # two small leases, each billed the 60 s minimum: 0.06 + 0.06 + 0.05
    plan["cost_usd"] = 0.17
    violations = check(plan, files)
    assert rules(violations) == {"lease-count"}
    assert "small#0" in violations[0] and "small#1" in violations[0]


def test_sequential_machines_of_a_type_are_allowed(files):
    plan = make_plan()
    # D on small#1 needs C's end 65 + 300/100 = 68 (B: 35 + 5 = 40); start it at 70,
    # so small#1 is leased [65, 80), after small#0's lease [0, 35) has ended
    assignment(plan, "D").update(resource="small", machine="small#1", start_s=70.0, end_s=80.0)
    # small#0: 60 s -> 0.06, fast#0 [45, 65) 20 s -> 0.04, small#1 [65, 80) 15 s -> 60 s -> 0.06
    plan["makespan_s"], plan["cost_usd"] = 80.0, 0.16
    assert check(plan, files) == []


def test_wrong_makespan_claim(files):
    plan = make_plan()
    plan["makespan_s"] = 71.0  # 1.4 % off
    assert rules(check(plan, files)) == {"makespan-claim"}
    plan["makespan_s"] = 70.3  # 0.43 % off: accepted
    assert check(plan, files) == []


def test_wrong_cost_claim(files):
    plan = make_plan()
    plan["cost_usd"] = 0.12  # 9 % off
    assert rules(check(plan, files)) == {"cost-claim"}
    plan["cost_usd"] = 0.1104  # 0.36 % off: accepted
    assert check(plan, files) == []


def test_missing_task(files):
    plan = make_plan()
    plan["assignments"] = [a for a in plan["assignments"] if a["task"] != "D"]
    violations = check(plan, files)
    assert "missing-task" in rules(violations)
    assert any("D" in v for v in violations if v.startswith("[missing-task]"))


def test_unknown_and_duplicate_task(files):
    plan = make_plan()
    plan["assignments"].append(_a("Z", "fast", 0, 70.0, 71.0, 1, 1))
    plan["assignments"].append(dict(assignment(plan, "D")))
    assert {"unknown-task", "duplicate-task"} <= rules(check(plan, files))


def test_unknown_resource(files):
    plan = make_plan()
    assignment(plan, "A").update(resource="huge", machine="huge#0")
    assert "unknown-resource" in rules(check(plan, files))


def test_machine_id_must_match_resource(files):
    plan = make_plan()
    assignment(plan, "A")["machine"] = "fast#0"
    assert "machine-id" in rules(check(plan, files))
    assignment(plan, "A")["machine"] = "small-0"
    assert "machine-id" in rules(check(plan, files))


def test_wrong_duration(files):
    plan = make_plan()
    assignment(plan, "A")["end_s"] = 24.0  # runtime 20 / speed 1 = 20 s, not 19
    assert rules(check(plan, files)) == {"duration"}


def test_lease_before_zero_because_of_boot(files):
    plan = make_plan()
    assignment(plan, "A").update(start_s=4.0, end_s=24.0)
    assignment(plan, "B").update(start_s=4.0, end_s=34.0)
    # small#0 lease [-1, 34): 35 s -> 60 s minimum, cost unchanged; C still >= 24 + 20
    violations = check(plan, files)
    assert rules(violations) == {"lease-start"}


def test_deadline(files):
    plan = make_plan()
    plan["objective"]["deadline_s"] = 70.0
    assert check(plan, files) == []
    plan["objective"]["deadline_s"] = 69.0
    assert "deadline" in rules(check(plan, files))


def test_budget(files):
    plan = make_plan()
    plan["objective"]["budget_usd"] = 0.11
    assert check(plan, files) == []
    plan["objective"]["budget_usd"] = 0.10
    assert "budget" in rules(check(plan, files))


def test_header_rules(files):
    plan = make_plan()
    plan["format"] = "agora-plan/2"
    del plan["solver"]["gap"]
    plan["created_at"] = "yesterday"
    del plan["objective"]["alpha"]
    del plan["workflow"]
    assert {"format", "solver", "created_at", "objective", "keys"} <= rules(check(plan, files))


def test_solver_status_and_null_gap(files):
    plan = make_plan()
    plan["solver"]["gap"] = 0.013
    assert check(plan, files) == []
    plan["solver"]["status"] = "done"
    assert rules(check(plan, files)) == {"solver"}


# --------------------------------------------------------------------------- billing


@pytest.mark.parametrize(
    "price, granularity, minimum, lease_s, expected",
    [
        (3.6, 10, 60, 25.0, 0.06),  # minimum wins: 30 s < 60 s
        (3.6, 10, 60, 75.0, 0.08),  # ceil(7.5) * 10 = 80 s
        (3.6, 10, 0, 70.0, 0.07),  # exact multiple: no extra unit
        (3.6, 10, 0, 0.1 + 0.2 + 29.7, 0.03),  # 30.000000000000004 s: still 3 units
        (3.6, 10, 0, 30.01, 0.04),  # a real extra 0.01 s: one more unit
        (3.6, 3600, 0, 3600.0000000001, 3.6),  # float noise over an hour: one hour
        (3.6, 3600, 0, 3601.0, 7.2),  # one second over: two hours
        (7.2, 1, 0, 25.0, 0.05),  # per-second billing
        (7.2, 1, 0, 0.0, 0.0),  # zero-length lease, no minimum
        (3.6, 10, 60, 0.0, 0.06),  # zero-length lease pays the minimum
    ],
)
def test_lease_cost(price, granularity, minimum, lease_s, expected):
    assert sc.lease_cost(price, granularity, minimum, lease_s) == pytest.approx(expected, abs=1e-12)


def test_recompute_cost_with_minimum_and_granularity(files):
    plan = make_plan()
    # D moves to small#1 at [100, 110): with the 5 s boot its lease is [95, 110) = 15 s
    assignment(plan, "D").update(resource="small", machine="small#1", start_s=100.0, end_s=110.0)
    makespan, cost = sc.recompute(plan, *files)
    # small#0 [0, 35): 35 s -> 40 s by granularity -> 60 s minimum = 0.06
    # fast#0 [45, 65): 20 s at 0.002 $/s = 0.04
    # small#1 [95, 110): 15 s -> 20 s by granularity -> 60 s minimum = 0.06
    assert makespan == pytest.approx(110.0)
    assert cost == pytest.approx(0.06 + 0.04 + 0.06, abs=1e-12)
    # B moves to [42.5, 72.5): small#0 lease [0, 72.5) -> 80 s (granularity beats minimum)
    assignment(plan, "B").update(start_s=42.5, end_s=72.5)
    makespan, cost = sc.recompute(plan, *files)
    assert cost == pytest.approx(0.08 + 0.04 + 0.06, abs=1e-12)
    plan["makespan_s"], plan["cost_usd"] = 110.0, 0.18
    assert check(plan, files) == []


# --------------------------------------------------------------------------- CLI


def test_cli_exit_codes(tmp_path, files, capsys):
    wf, cat = files
    good = tmp_path / "good.json"
    good.write_text(json.dumps(make_plan()))
    assert sc.main([str(good), "--workflow", str(wf), "--catalog", str(cat)]) == 0
    assert capsys.readouterr().out == ""
    plan = make_plan()
    plan["cost_usd"] = 1.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(plan))
    assert sc.main([str(bad), "--workflow", str(wf), "--catalog", str(cat)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[cost-claim]")


# --------------------------------------------------------------------------- real data


def _serial_plan(workflow_path: Path) -> dict:
    """Every task, in topological order, one after another on a single big machine."""
    doc = json.loads(workflow_path.read_text())
    spec = {t["id"]: t for t in doc["workflow"]["specification"]["tasks"]}
    run = {t["id"]: t for t in doc["workflow"]["execution"]["tasks"]}
    order, done = [], set()
    pending = list(spec)
    while pending:
        ready = [t for t in pending if all(p in done for p in spec[t]["parents"])]
        order += ready
        done.update(ready)
        pending = [t for t in pending if t not in done]
    t, assignments = 0.0, []
    for tid in order:
        r = run[tid]
        end = t + float(r["runtimeInSeconds"])
        assignments.append(
            {
                "task": tid,
                "resource": "big",
                "machine": "big#0",
                "start_s": t,
                "end_s": end,
                "cores": r.get("coreCount") or 1,
                "memory_bytes": max(int(r.get("memoryInBytes") or 0), GIB),
            }
        )
        t = end
    plan = make_plan()
    plan.update(
        assignments=assignments,
        makespan_s=t,
        cost_usd=1.0 / 3600 * max(60.0, math.ceil(t)),
    )
    return plan


@pytest.mark.skipif(not WFINSTANCES.is_dir(), reason="WfInstances not available")
@pytest.mark.parametrize(
    "name",
    [
        "blast-chameleon-small-001",
        "montage-chameleon-2mass-005d-001",
        "bacass-dirt02-001",
        "1000genome-chameleon-2ch-100k-001",
    ],
)
def test_real_workflow_serial_plan(tmp_path, name):
    wf = WFINSTANCES / f"{name}.json"
    cat = tmp_path / "big.yaml"
    cat.write_text(
        "network: {bandwidth_bytes_per_s: 1.25e9}\nresources:\n"
        "  - {name: big, backend: local, vcpus: 64, memory_gib: 1024, speed: 1.0,\n"
        "     price_per_hour_usd: 1.0, count: 1,\n"
        "     billing: {granularity_s: 1, minimum_s: 60}, boot_s: 0}\n"
    )
    plan = _serial_plan(wf)
    assert sc.check_plan(plan, wf, cat) == []
    # shifting the last task earlier by a second breaks precedence or duration
    plan["assignments"][-1]["start_s"] -= 1.0
    assert sc.check_plan(plan, wf, cat) != []


def _asap_plan(workflow_path: Path, bandwidth: float) -> tuple[dict, float]:
    """Every task on its own machine, as soon as its parents' files have arrived."""
    doc = json.loads(workflow_path.read_text())
    spec = {t["id"]: t for t in doc["workflow"]["specification"]["tasks"]}
    run = {t["id"]: t for t in doc["workflow"]["execution"]["tasks"]}
    size = {f["id"]: f["sizeInBytes"] for f in doc["workflow"]["specification"]["files"]}
    end, ready_at, pending = {}, {}, list(spec)
    while pending:
        for tid in [t for t in pending if all(p in end for p in spec[t]["parents"])]:
            waits = [0.0]
            for p in spec[tid]["parents"]:
                shared = set(spec[p]["outputFiles"]) & set(spec[tid]["inputFiles"])
                waits.append(end[p] + sum(size[f] for f in shared) / bandwidth)
            ready_at[tid] = max(waits)
            end[tid] = ready_at[tid] + float(run[tid]["runtimeInSeconds"])
            pending.remove(tid)
    assignments = [
        {
            "task": tid,
            "resource": "wide",
            "machine": f"wide#{i}",
            "start_s": ready_at[tid],
            "end_s": end[tid],
            "cores": run[tid].get("coreCount") or 1,
            "memory_bytes": max(int(run[tid].get("memoryInBytes") or 0), GIB),
        }
        for i, tid in enumerate(spec)
    ]
    plan = make_plan()
    plan["assignments"] = assignments
    return plan, max(end.values())


@pytest.mark.skipif(not WFINSTANCES.is_dir(), reason="WfInstances not available")
@pytest.mark.parametrize("name", ["montage-chameleon-2mass-005d-001", "sarek-dirt02-001"])
def test_real_workflow_asap_plan_with_transfers(tmp_path, name):
    wf = WFINSTANCES / f"{name}.json"
    cat = tmp_path / "wide.yaml"
    cat.write_text(
        "network: {bandwidth_bytes_per_s: 1.0e6}\nresources:\n"
        "  - {name: wide, backend: aws, vcpus: 64, memory_gib: 1024, speed: 1.0,\n"
        "     price_per_hour_usd: 1.0, count: null,\n"
        "     billing: {granularity_s: 1, minimum_s: 60}, boot_s: 0}\n"
    )
    plan, makespan = _asap_plan(wf, 1.0e6)
    plan["makespan_s"], plan["cost_usd"] = sc.recompute(plan, wf, cat)
    assert plan["makespan_s"] == pytest.approx(makespan, abs=1e-9)
    assert sc.check_plan(plan, wf, cat) == []
    # start the task with the longest transfer wait half that wait too early
    edges = sc.load_workflow(wf).edges
    by_task = {a["task"]: a for a in plan["assignments"]}
    i, j = max(edges, key=lambda e: edges[e])
    assert edges[(i, j)] > 0
    a = by_task[j]
    shift = edges[(i, j)] / 1.0e6 / 2
    a["start_s"] -= shift
    a["end_s"] -= shift
    assert "precedence" in rules(sc.check_plan(plan, wf, cat))


def test_gpus_of_section_5(tmp_path):
    doc = make_workflow()
    doc["workflow"]["execution"]["tasks"][0]["gpus"] = 1  # A, in its record
    doc["workflow"]["specification"]["tasks"][1]["gpus"] = 1  # B, in its entry
    wf = tmp_path / "w.json"
    wf.write_text(json.dumps(doc))
    cat = tmp_path / "c.yaml"
    cat.write_text(CATALOG_YAML.replace("    boot_s: 5\n", "    boot_s: 5\n    gpus: 2\n", 1))
    plan = make_plan()
    assignment(plan, "A")["gpus"] = 1
    assignment(plan, "B")["gpus"] = 1
    assert sc.check_plan(plan, wf, cat) == []  # two 1-GPU tasks at once on a 2-GPU machine
    assignment(plan, "B")["gpus"] = 2
    violations = sc.check_plan(plan, wf, cat)
    assert rules(violations) == {"capacity-gpus"} and "small#0" in violations[0] and "A, B" in violations[0]
    del assignment(plan, "B")["gpus"]  # absent: 0, below B's 1
    assert rules(sc.check_plan(plan, wf, cat)) == {"gpus"}
    assignment(plan, "B")["gpus"] = 1
    assignment(plan, "D")["gpus"] = 1  # fast has none
    assert rules(sc.check_plan(plan, wf, cat)) == {"gpus", "capacity-gpus"}
