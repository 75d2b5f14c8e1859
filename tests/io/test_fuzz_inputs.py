"""Fuzzing the loaders and the CLI with mangled workflows, catalogs and plans.

The contract (``agora_optimizer/errors.py``, ``agora_optimizer/cli/common.py``): bad input
gets one clear ``agora: error: ...`` line that names the file (and the field path or
task), exit code 2, nothing written, and never a traceback. ``agora validate`` may
also exit 1 when a well-formed plan breaks a rule of the model.

Every property starts from a real, valid document (the bundled WfFormat 1.5 BLAST
instance, a hand-built WfFormat 1.4 instance, the AWS catalog, and a plan written by
``agora optimize``) and mangles it: a key deleted, renamed or duplicated, a value
replaced by one of another type or by a raw token (NaN, Infinity, 1e999, a
5000-digit integer, a lone surrogate, a YAML tag ...), values swapped, the file
truncated, garbage bytes inserted, the encoding changed; and for workflows, unknown
parents, cycles and duplicate ids. The runs are derandomized, so CI sees the same
examples every time.
"""

from __future__ import annotations

import codecs
import contextlib
import copy
import io
import json
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from agora_optimizer import cli
from agora_optimizer.errors import AgoraError, CyclicWorkflowError, FieldError, InputFileError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.workflow import Workflow

pytestmark = pytest.mark.slow  # seconds of planning per test: make test runs it, make test-fast does not

ROOT = Path(__file__).resolve().parents[2]
BLAST = ROOT / "workflows" / "blast-chameleon-small-001.json"
CATALOG = ROOT / "catalogs" / "aws-us-east-1.yaml"

FUZZ = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# The properties are about input handling, not plan quality: the optimizer gets the least time
# it accepts (it always builds at least one schedule).
QUICK = ("--time-limit-s", "0.01")
SPENT_BEFORE_PLANNING = re.compile(r"^agora: [\d.]+ s of --time-limit-s [\d.]+ went before planning .*\n", re.M)
MAX_MESSAGE_CHARS = 600  # beyond the file path: a clear message quotes values, not whole documents


# --------------------------------------------------------------------------- documents


def _v14_document() -> dict[str, Any]:
    """A WfFormat 1.4 instance: prepare -> (work_ID02, work_ID03) -> merge.

    work_ID03 records no memory (category median of 'work' = 512 MiB applies) and
    merge_ID04 records none either and has no category peer (the default applies).
    """

    def file(name: str, size: int, link: str) -> dict[str, Any]:
        return {"name": name, "sizeInBytes": size, "link": link}

    def task(name: str, parents: list[str], files: list[dict[str, Any]], runtime_s: float, cores: int) -> dict:
        return {
            "name": name,
            "type": "compute",
            "parents": parents,
            "files": files,
            "runtimeInSeconds": runtime_s,
            "cores": cores,
        }

    prepare = task(
        "prepare_ID01",
        [],
        [file("raw.dat", 1000, "input"), file("part1.dat", 400, "output"), file("part2.dat", 600, "output")],
        10.0,
        1,
    )
    prepare["memoryInBytes"] = 2**28
    work2 = task(
        "work_ID02", ["prepare_ID01"], [file("part1.dat", 400, "input"), file("out1.dat", 50, "output")], 30.5, 2
    )
    work2["memoryInBytes"] = 2**29
    work3 = task(
        "work_ID03", ["prepare_ID01"], [file("part2.dat", 600, "input"), file("out2.dat", 70, "output")], 25.0, 2
    )
    merge = task(
        "merge_ID04",
        ["work_ID02", "work_ID03"],
        [file("out1.dat", 50, "input"), file("out2.dat", 70, "input"), file("result.dat", 10, "output")],
        5.0,
        1,
    )
    return {
        "name": "tiny-v14",
        "schemaVersion": "1.4",
        "workflow": {
            "makespanInSeconds": 70.5,
            "executedAt": "20260101T000000+0000",
            "tasks": [prepare, work2, work3, merge],
        },
    }


BLAST_DOC: dict[str, Any] = json.loads(BLAST.read_text(encoding="utf-8"))
V14_DOC = _v14_document()
CATALOG_DOC: dict[str, Any] = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
V14_NAME = "tiny-v14"


@dataclass(frozen=True)
class Baseline:
    """Valid inputs on disk: the v1.4 workflow and the plans ``agora optimize`` wrote."""

    v14: Path
    blast_plan: Path
    v14_plan: Path

    @property
    def blast_plan_doc(self) -> dict[str, Any]:
        return json.loads(self.blast_plan.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    folder = tmp_path_factory.mktemp("baseline")
    v14 = folder / f"{V14_NAME}.json"
    v14.write_text(json.dumps(V14_DOC, indent=1), encoding="utf-8")
    plans = {}
    for name, workflow in (("blast", BLAST), ("v14", v14)):
        out = folder / f"{name}-plan.json"
        with contextlib.redirect_stdout(io.StringIO()):
            cli.main(["optimize", str(workflow), "-c", str(CATALOG), "-o", str(out), "--time-limit-s", "1", "--json"])
        assert out.is_file(), f"agora optimize {workflow} wrote no plan"
        plans[name] = out
    return Baseline(v14=v14, blast_plan=plans["blast"], v14_plan=plans["v14"])


# --------------------------------------------------------------------------- the CLI


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def _cli(capsys: pytest.CaptureFixture[str], *argv: object) -> Run:
    """Run ``agora ARGV`` in-process: it must not raise, print a traceback, or disagree with itself."""
    code = cli.main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    err = SPENT_BEFORE_PLANNING.sub("", err)  # QUICK's 0.01 s: the first schedule is the plan, and it says so
    assert "Traceback" not in out and "Traceback" not in err, err
    failed = err.startswith("agora: error: ")
    broke_rules = re.search(r": \d+ violation\(s\)\s*$", err) is not None
    expected = 2 if failed else 1 if broke_rules else 0
    if expected == 0:
        assert err == "", err
    assert code == expected, f"exit code {code} but stderr: {err!r}"
    return Run(code, out, err)


def _assert_nothing_written(out: Path) -> None:
    assert not out.exists(), f"{out} was written although the command failed"
    if out.parent.exists():
        assert list(out.parent.iterdir()) == [], f"{out.parent} holds leftovers: {list(out.parent.iterdir())}"


def _optimize(capsys: pytest.CaptureFixture[str], workflow: Path, catalog: Path, folder: Path) -> Run:
    """``agora optimize``; on success the plan it wrote must load and pass ``agora validate``."""
    out = folder / "out" / "plan.json"
    run = _cli(capsys, "optimize", workflow, "-c", catalog, "-o", out, *QUICK, "--json")
    assert run.code in (0, 2)
    if run.code == 2:
        _assert_nothing_written(out)
    else:
        plan = load_plan(out)  # one assignment per task (none for a workflow with no tasks: the empty plan)
        assert sorted(a.task for a in plan.assignments) == sorted(t.id for t in load_workflow(workflow).tasks)
        checked = _cli(capsys, "validate", out, "-w", workflow, "-c", catalog)
        assert checked.code == 0, checked.out
    return run


def _validate(capsys: pytest.CaptureFixture[str], plan: Path, workflow: Path, catalog: Path) -> Run:
    return _cli(capsys, "validate", plan, "-w", workflow, "-c", catalog)


# --------------------------------------------------------------------------- loaders


def _load_or_error(load: Callable[[Path], Any], path: Path) -> tuple[Any, AgoraError | None]:
    """Call a loader: it returns a value or raises an ``AgoraError`` naming the file (nothing else)."""
    try:
        loaded = load(path)
    except AgoraError as exc:
        event(f"{load.__name__}: {type(exc).__name__}")
        message = str(exc)
        names_file = str(path) in message
        if isinstance(exc, CyclicWorkflowError):
            names_file = names_file or f"'{path.stem}'" in message  # the workflow is named after its file
        assert names_file, f"the message does not name {path}: {message}"
        assert len(message) <= len(str(path)) + MAX_MESSAGE_CHARS, f"unclear, {len(message)} chars: {message[:300]}"
        return None, exc
    event(f"{load.__name__}: loaded")
    return loaded, None


def _workflow_edges(document: Any) -> set[tuple[str, str]]:
    """Parent -> child pairs as a WfFormat 1.4 or 1.5 document states them (well-formed parts only)."""
    edges: set[tuple[str, str]] = set()
    try:
        wf = document["workflow"]
        tasks, key = (wf["specification"]["tasks"], "id") if "specification" in wf else (wf["tasks"], "name")
        for task in tasks:
            for parent in task.get("parents", []):
                edges.add((parent, task[key]))
            for child in task.get("children", []):
                edges.add((task[key], child))
    except (KeyError, TypeError, AttributeError):
        pass
    return edges


# --------------------------------------------------------------------------- mangling

Location = tuple[Any, ...]

WEIRD_VALUES = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            -0.5,
            5e-324,
            1e-300,
            0.1,
            1.5,
            2**31,
            2**63,
            10**30,
            10**400,
            1e308,
            -1e308,
            float("nan"),
            float("inf"),
            float("-inf"),
            "",
            " ",
            "0",
            "-1",
            "1.25e9",
            "nan",
            "inf",
            "1e999",
            "yes",
            "x" * 300,
            "c5.large",
            "c5.large#0",
            "a#b",
            "input",
            "2026-11-29T12:00:00Z",
            [],
            [None],
            [[]],
            ["no_such_task"],
            {},
            {"": None},
            {"id": 1},
        ]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=4)), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)

# Tokens spliced into the text as they are, so that they reach the parser raw.
JSON_RAW = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1" * 5000,
    "1" * 400,
    "1e-400",
    "-0",
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\u0000"',
    "01",
    "tru",
    "[1,",
    "",
    '{"a": 1, "a": 2}',
    "[" * 50_000 + "]" * 50_000,
]
YAML_RAW = [
    ".nan",
    ".inf",
    "-.inf",
    "1.25e9",
    "1e999",
    "0x1F",
    "0o17",
    "1_000",
    "2026-01-01",
    "2026-01-01T00:00:00Z",
    "!!binary aGVsbG8=",
    "~",
    "*undefined_alias",
    "!!python/object/apply:os.system ['true']",
    "!custom 3",
    "yes",
    "'9'",
    '"\\ud800"',
    '"\\U0001F600"',
    "&loop [*loop]",
    "[1, 2",
    "{a: 1",
    "{[1]: 2}",
    "1" * 5000,
    "- a\n- b",
]

Format = str  # "json" or "yaml"


def _locations(document: Any) -> list[Location]:
    """Every path inside ``document`` (keys and list indices), the root excluded."""
    found: list[Location] = []
    stack: list[tuple[Location, Any]] = [((), document)]
    while stack:
        location, value = stack.pop()
        if location:
            found.append(location)
        if isinstance(value, dict):
            stack.extend(((*location, key), child) for key, child in value.items())
        elif isinstance(value, list):
            stack.extend(((*location, i), child) for i, child in enumerate(value))
    return found


def _shape(location: Location) -> tuple[str, ...]:
    return tuple("[]" if isinstance(key, int) else f".{key}" for key in location)


def _draw_location(draw: st.DrawFn, document: Any) -> Location | None:
    """A location, drawn first by shape (``workflow.tasks[].cores``) then by index, so rare fields get hit."""
    by_shape: dict[tuple[str, ...], list[Location]] = defaultdict(list)
    for location in _locations(document):
        by_shape[_shape(location)].append(location)
    if not by_shape:
        return None
    shape = draw(st.sampled_from(sorted(by_shape)))
    return draw(st.sampled_from(sorted(by_shape[shape], key=repr)))


def _container(document: Any, location: Location) -> tuple[Any, Any]:
    node = document
    for key in location[:-1]:
        node = node[key]
    return node, location[-1]


def _value_at(document: Any, location: Location) -> Any:
    parent, key = _container(document, location)
    return parent[key]


def _mutate(draw: st.DrawFn, document: Any, raw: dict[str, str], fmt: Format) -> Any:
    """Apply one random mutation to ``document`` in place (or return a new root)."""
    op = draw(st.sampled_from(["delete", "replace", "raw", "rename", "swap", "duplicate", "root", *["plausible"] * 4]))
    if op == "root":
        return draw(st.sampled_from([None, [], "workflow", 42, [document], {"workflow": None}]))
    location = _draw_location(draw, document)
    if location is None:
        return document
    parent, key = _container(document, location)
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = draw(WEIRD_VALUES)
    elif op == "raw":
        placeholder = f"__RAW_{len(raw)}__"
        raw[placeholder] = draw(st.sampled_from(JSON_RAW if fmt == "json" else YAML_RAW))
        parent[key] = placeholder
    elif op == "rename" and isinstance(parent, dict):
        parent[draw(st.sampled_from([f"{key}_", str(key).upper(), ""]))] = parent.pop(key)
    elif op == "swap":
        other = _draw_location(draw, document)
        if other is not None:
            parent[key] = copy.deepcopy(_value_at(document, other))
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    elif op == "plausible":
        parent[key] = _plausible(draw, parent[key], document)
    return document


def _plausible(draw: st.DrawFn, value: Any, document: Any) -> Any:
    """A value of the same type, often still valid, so that the optimizer and checker see odd inputs."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return draw(st.sampled_from([0, 1, 3, value + 1, max(value - 1, 0), 2 * value, value // 2, 1000 * value]))
    if isinstance(value, float):
        return value * draw(st.sampled_from([0.0, 1e-12, 1e-3, 0.5, 0.999, 1.001, 2.0, 1e3, 1e6]))
    if isinstance(value, str):
        strings = sorted({v for v in _leaves(document) if isinstance(v, str)})
        return draw(st.sampled_from(strings)) if strings else value
    if isinstance(value, list) and value:
        return draw(st.sampled_from([value[::-1], value[1:], value[:1], value + value[:1]]))
    return value


def _leaves(document: Any) -> list[Any]:
    leaves = []
    for location in _locations(document):
        value = _value_at(document, location)
        if not isinstance(value, dict | list):
            leaves.append(value)
    return leaves


def _dump(document: Any, fmt: Format, raw: dict[str, str]) -> str:
    if fmt == "json":
        text = json.dumps(document, indent=1)  # NaN and Infinity come out as raw tokens
        for placeholder, token in raw.items():
            text = text.replace(json.dumps(placeholder), token)
        return text
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=200)
    for placeholder, token in raw.items():
        text = text.replace(f"'{placeholder}'", token).replace(placeholder, token)
    return text


@st.composite
def _garbled(draw: st.DrawFn, data: bytes) -> bytes:
    """Damage the bytes of a file: cut, insert, delete, re-encode."""
    kind = draw(st.sampled_from(["truncate", "truncate", "insert", "delete", "bom", "utf16", "latin1", "empty"]))
    at = draw(st.integers(min_value=0, max_value=len(data)))
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]
    if kind == "delete":
        return data[:at] + data[draw(st.integers(min_value=at, max_value=min(len(data), at + 64))) :]
    if kind == "bom":
        return codecs.BOM_UTF8 + data
    text = data.decode("utf-8", errors="replace")
    if kind == "utf16":
        return text.encode("utf-16")
    if kind == "latin1":
        return (text + " é").encode("latin-1", errors="replace")
    return b""


Semantic = Callable[[st.DrawFn, Any], None]


@st.composite
def mangled(draw: st.DrawFn, document: Any, fmt: Format, semantic: Semantic | None = None) -> bytes:
    """The bytes of ``document`` after some damage: workflow-specific, 0-2 mutations, then maybe garbling."""
    document = copy.deepcopy(document)
    raw: dict[str, str] = {}
    semantic_applied = semantic is not None and draw(st.integers(min_value=0, max_value=2)) == 0
    if semantic_applied:
        assert semantic is not None
        semantic(draw, document)
    for _ in range(draw(st.integers(min_value=0 if semantic_applied else 1, max_value=2))):
        document = _mutate(draw, document, raw, fmt)
    data = _dump(document, fmt, raw).encode("utf-8", errors="surrogatepass")
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        data = draw(_garbled(data))
    return data


# Workflow-specific damage: the task list of each format and its id key.


def _task_list(document: Any) -> tuple[list[dict[str, Any]], str]:
    workflow = document["workflow"]
    if "specification" in workflow:
        return workflow["specification"]["tasks"], "id"
    return workflow["tasks"], "name"


def _ancestor_pair(draw: st.DrawFn, document: Any) -> tuple[str, str]:
    """(ancestor, descendant): a random task and a task reached from it by following children."""
    edges = sorted(_workflow_edges(document))
    tasks, key = _task_list(document)
    start = draw(st.sampled_from(sorted(task[key] for task in tasks)))
    node = start
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        children = [child for parent, child in edges if parent == node]
        if not children:
            break
        node = draw(st.sampled_from(children))
    return start, node


def _workflow_damage(draw: st.DrawFn, document: Any) -> None:
    tasks, key = _task_list(document)
    by_id = {task[key]: task for task in tasks}
    kind = draw(st.sampled_from(["cycle", "unknown-parent", "unknown-child", "duplicate-id", "no-tasks"]))
    if kind == "cycle":  # ancestor == descendant makes a task its own parent
        ancestor, descendant = _ancestor_pair(draw, document)
        by_id[ancestor].setdefault("parents", []).append(descendant)
    elif kind == "unknown-parent":
        draw(st.sampled_from(tasks)).setdefault("parents", []).append("no_such_task_ID999")
    elif kind == "unknown-child" and key == "id":
        draw(st.sampled_from(tasks)).setdefault("children", []).append("no_such_task_ID999")
    elif kind == "duplicate-id":
        first, second = draw(st.lists(st.sampled_from(tasks), min_size=2, max_size=2, unique_by=id))
        second[key] = first[key]
    elif kind == "no-tasks":
        tasks.clear()


# --------------------------------------------------------------------------- properties: workflows


@contextlib.contextmanager
def _written(tmp_path: Path, name: str, data: bytes) -> Iterator[Path]:
    """The file ``name``, holding ``data``, in a fresh folder per hypothesis example (tmp_path is
    shared by all examples of a test)."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        path = Path(scratch) / name
        path.write_bytes(data)
        yield path


def _check_workflow(path: Path, data: bytes) -> AgoraError | None:
    loaded, error = _load_or_error(load_workflow, path)
    if loaded is not None:
        assert isinstance(loaded, Workflow)
        for task in loaded.tasks:
            assert task.cores >= 1 and task.memory_bytes > 0 and task.runtime_s >= 0
    if isinstance(error, CyclicWorkflowError):
        edges = _workflow_edges(json.loads(data))
        cycle = error.cycle
        assert cycle, error
        for i, task in enumerate(cycle):
            assert (task, cycle[(i + 1) % len(cycle)]) in edges, f"{cycle} is not a cycle of the file's edges"
            assert task in str(error)
    return error


@FUZZ
@given(data=mangled(BLAST_DOC, "json", semantic=_workflow_damage))
def test_mangled_wfformat_15_is_loaded_or_refused_clearly(
    data: bytes, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _mangled_workflow_is_planned_or_refused(data, BLAST.name, baseline.blast_plan, capsys, tmp_path)


@FUZZ
@given(data=mangled(V14_DOC, "json", semantic=_workflow_damage))
def test_mangled_wfformat_14_is_loaded_or_refused_clearly(
    data: bytes, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _mangled_workflow_is_planned_or_refused(data, f"{V14_NAME}.json", baseline.v14_plan, capsys, tmp_path)


def _mangled_workflow_is_planned_or_refused(
    data: bytes, name: str, plan: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``agora optimize`` and ``agora validate`` of ``plan`` (made for a workflow of that stem) on the mangled
    ``data`` as the workflow file ``name``: both work, or both refuse it clearly."""
    with _written(tmp_path, name, data) as workflow:
        error = _check_workflow(workflow, data)
        run = _optimize(capsys, workflow, CATALOG, workflow.parent)
        if error is not None:
            assert run.code == 2 and str(workflow.stem) in run.err
        checked = _validate(capsys, plan, workflow, CATALOG)
        assert checked.code == 2 if error is not None else checked.code in (0, 1)


@st.composite
def _back_edge(draw: st.DrawFn, document: Any) -> tuple[bytes, str, str]:
    document = copy.deepcopy(document)
    ancestor, descendant = _ancestor_pair(draw, document)
    tasks, key = _task_list(document)
    next(task for task in tasks if task[key] == ancestor).setdefault("parents", []).append(descendant)
    return json.dumps(document).encode(), ancestor, descendant


@FUZZ
@given(case=st.one_of(_back_edge(BLAST_DOC), _back_edge(V14_DOC)))
def test_an_edge_back_to_an_ancestor_is_reported_as_a_cycle(case: tuple[bytes, str, str], tmp_path: Path) -> None:
    data, ancestor, descendant = case
    with _written(tmp_path, "wf.json", data) as path:
        with pytest.raises(CyclicWorkflowError) as caught:
            load_workflow(path)
        error = _check_workflow(path, data)
        assert isinstance(error, CyclicWorkflowError)
        assert caught.value.cycle == error.cycle
        if ancestor == descendant:
            assert error.cycle == [ancestor]


# --------------------------------------------------------------------------- properties: catalogs


@FUZZ
@given(fmt=st.sampled_from(["yaml", "yaml", "json"]), choice=st.data())
def test_mangled_catalog_is_loaded_or_refused_clearly(
    fmt: Format, choice: st.DataObject, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = choice.draw(mangled(CATALOG_DOC, fmt), label="catalog")
    with _written(tmp_path, f"catalog.{fmt}", data) as catalog:
        _, error = _load_or_error(load_catalog, catalog)
        run = _optimize(capsys, BLAST, catalog, catalog.parent)
        if error is not None:
            assert run.code == 2 and str(catalog) in run.err
        checked = _validate(capsys, baseline.blast_plan, BLAST, catalog)
        if error is not None:
            assert checked.code == 2 and str(catalog) in checked.err
        else:
            assert checked.code in (0, 1)


EXTREMES = [0, 5e-324, 1e-300, 1e-12, 1e-3, 0.5, 1, 3, 1000, 86400, 4096, 65536, 1e6, 1e13, 2**50, 2**60]
RESOURCE_NUMBERS = ["vcpus", "memory_gib", "speed", "price_per_hour_usd", "count", "boot_s"]


@settings(FUZZ, max_examples=40)
@given(
    field=st.sampled_from([*RESOURCE_NUMBERS, "billing.granularity_s", "billing.minimum_s", "bandwidth_bytes_per_s"]),
    value=st.sampled_from(EXTREMES),
    everywhere=st.booleans(),
)
@example(field="speed", value=5e-324, everywhere=False)  # a task's duration overflowed to inf
@example(field="billing.granularity_s", value=5e-324, everywhere=True)  # so did the billing steps
@example(field="bandwidth_bytes_per_s", value=5e-324, everywhere=True)  # and transfers (inf - inf = NaN)
def test_extreme_catalog_numbers_are_planned_or_refused(
    field: str, value: float, everywhere: bool, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Numbers at and beyond the edges of what the loader accepts, on one resource or on all of them."""
    document = copy.deepcopy(CATALOG_DOC)
    if field == "bandwidth_bytes_per_s":
        document["network"][field] = value
    for resource in document["resources"] if everywhere else document["resources"][:1]:
        if field.startswith("billing."):
            resource["billing"][field.removeprefix("billing.")] = value
        elif field in resource:
            resource[field] = value
    with _written(tmp_path, "catalog.yaml", yaml.safe_dump(document).encode("utf-8")) as catalog:
        _, error = _load_or_error(load_catalog, catalog)
        run = _optimize(capsys, BLAST, catalog, catalog.parent)
        assert error is None or run.code == 2
        _validate(capsys, baseline.blast_plan, BLAST, catalog)


@settings(FUZZ, max_examples=40)
@given(
    field=st.sampled_from(["runtimeInSeconds", "coreCount", "memoryInBytes", "sizeInBytes"]),
    value=st.sampled_from(EXTREMES),
    everywhere=st.booleans(),
)
def test_extreme_task_numbers_are_planned_or_refused(
    field: str, value: float, everywhere: bool, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = copy.deepcopy(BLAST_DOC)
    spec, execution = document["workflow"]["specification"], document["workflow"]["execution"]
    records = spec["files"] if field == "sizeInBytes" else execution["tasks"]
    for record in records if everywhere else records[:1]:
        record[field] = value
    with _written(tmp_path, BLAST.name, json.dumps(document).encode("utf-8")) as workflow:
        _, error = _load_or_error(load_workflow, workflow)
        run = _optimize(capsys, workflow, CATALOG, workflow.parent)
        assert error is None or run.code == 2
        _validate(capsys, baseline.blast_plan, workflow, CATALOG)


# --------------------------------------------------------------------------- properties: plans


@FUZZ
@given(choice=st.data())
def test_mangled_plan_is_loaded_or_refused_clearly(
    choice: st.DataObject, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = choice.draw(mangled(baseline.blast_plan_doc, "json"), label="plan")
    with _written(tmp_path, "plan.json", data) as plan:
        loaded, error = _load_or_error(load_plan, plan)
        run = _validate(capsys, plan, BLAST, CATALOG)
        if error is not None:
            assert run.code == 2 and str(plan) in run.err
        elif loaded.workflow == BLAST.stem:
            assert run.code in (0, 1)
        else:
            assert run.code == 2 and f"'{loaded.workflow}'" in run.err


@settings(FUZZ, max_examples=30)
@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")
@given(choice=st.data())
def test_mangled_plan_is_drawn_or_refused_clearly(
    choice: st.DataObject, baseline: Baseline, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = choice.draw(mangled(baseline.blast_plan_doc, "json"), label="plan")
    with _written(tmp_path, "plan.json", data) as plan:
        _, error = _load_or_error(load_plan, plan)
        out = plan.parent / "chart" / "gantt.png"
        run = _cli(capsys, "gantt", plan, "-o", out, "-w", BLAST)
        assert run.code in (0, 2)
        if run.code == 2:
            _assert_nothing_written(out)
        else:
            assert out.stat().st_size > 0
        if error is not None:
            assert run.code == 2 and str(plan) in run.err


# --------------------------------------------------------------------------- deterministic cases


def _write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


def _v14_with(**changes: dict[str, Any]) -> dict[str, Any]:
    """The v1.4 document with some tasks' fields changed: ``_v14_with(work_ID02={"cores": 64})``."""
    document = copy.deepcopy(V14_DOC)
    for task in document["workflow"]["tasks"]:
        task.update(changes.get(task["name"], {}))
    return document


def test_the_hand_built_v14_document_loads_as_stated(baseline: Baseline) -> None:
    workflow = load_workflow(baseline.v14)
    assert workflow.name == V14_NAME
    memory = {task.id: (task.memory_bytes, task.memory_source) for task in workflow.tasks}
    assert memory == {
        "prepare_ID01": (2**28, "recorded"),
        "work_ID02": (2**29, "recorded"),
        "work_ID03": (2**29, "category-median"),
        "merge_ID04": (2**30, "default"),
    }
    assert {(e.parent, e.child): e.bytes for e in workflow.edges} == {
        ("prepare_ID01", "work_ID02"): 400,
        ("prepare_ID01", "work_ID03"): 600,
        ("work_ID02", "merge_ID04"): 50,
        ("work_ID03", "merge_ID04"): 70,
    }


@pytest.mark.parametrize("which", ["blast", "v14"])
def test_the_baseline_plans_are_valid(which: str, baseline: Baseline, capsys: pytest.CaptureFixture[str]) -> None:
    plan, workflow = (baseline.blast_plan, BLAST) if which == "blast" else (baseline.v14_plan, baseline.v14)
    run = _validate(capsys, plan, workflow, CATALOG)
    assert run.code == 0 and "valid" in run.out


def test_main_returns_the_exit_code_of_a_failed_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.json"
    assert cli.main(["optimize", str(missing), "-c", str(CATALOG), "-o", str(tmp_path / "plan.json")]) == 2
    assert capsys.readouterr().err.startswith(f"agora: error: {missing}: no such file")


def test_a_cycle_error_names_the_tasks_of_the_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # prepare -> work_ID02 -> merge -> prepare, and prepare -> work_ID03 -> merge -> prepare
    path = _write_json(tmp_path / "cyclic.json", _v14_with(prepare_ID01={"parents": ["merge_ID04"]}))
    with pytest.raises(CyclicWorkflowError) as caught:
        load_workflow(path)
    cycle = caught.value.cycle
    assert cycle[0] == "merge_ID04" or "merge_ID04" in cycle
    assert set(cycle) in ({"prepare_ID01", "work_ID02", "merge_ID04"}, {"prepare_ID01", "work_ID03", "merge_ID04"})
    assert " -> ".join([*cycle, cycle[0]]) in str(caught.value)
    out = tmp_path / "out" / "plan.json"
    run = _cli(capsys, "optimize", path, "-c", CATALOG, "-o", out, *QUICK)
    assert run.code == 2 and "not a DAG" in run.err and "'cyclic'" in run.err
    assert all(task in run.err for task in cycle)
    _assert_nothing_written(out)


def test_a_task_that_is_its_own_parent_is_a_cycle(tmp_path: Path) -> None:
    path = _write_json(tmp_path / "selfish.json", _v14_with(work_ID03={"parents": ["prepare_ID01", "work_ID03"]}))
    with pytest.raises(CyclicWorkflowError, match=r"cycle work_ID03 -> work_ID03"):
        load_workflow(path)


@pytest.mark.parametrize(
    ("cores", "memory_bytes"),
    [(256, 2**29), (2, 2**42), (4096, 2**45)],  # beyond the largest type, p5.48xlarge (192 vCPUs, 2 TiB)
    ids=["too-many-cores", "too-much-memory", "both"],
)
def test_a_task_too_big_for_every_resource_is_named_with_the_largest_resource(
    cores: int, memory_bytes: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_json(tmp_path / "big.json", _v14_with(work_ID02={"cores": cores, "memoryInBytes": memory_bytes}))
    largest = load_catalog(CATALOG).largest()
    out = tmp_path / "out" / "plan.json"
    run = _cli(capsys, "optimize", path, "-c", CATALOG, "-o", out, *QUICK)
    assert run.code == 2
    for expected in (
        "'work_ID02'",
        f"cores={cores}",
        f"memory_bytes={memory_bytes}",
        largest.name,
        f"{largest.vcpus} vcpus",
        f"{largest.memory_bytes} bytes",
    ):
        assert expected in run.err, f"{expected!r} not in {run.err!r}"
    _assert_nothing_written(out)


def _commands(tmp_path: Path, workflow: Path, catalog: Path, plan: Path) -> list[list[object]]:
    return [
        ["optimize", workflow, "-c", catalog, "-o", tmp_path / "out" / "plan.json", *QUICK],
        ["validate", plan, "-w", workflow, "-c", catalog],
        ["gantt", plan, "-o", tmp_path / "out" / "chart.png", "-w", workflow],
    ]


@pytest.mark.parametrize("broken", ["workflow", "catalog", "plan"])
@pytest.mark.parametrize("how", ["missing", "directory", "empty", "not-utf8"])
def test_an_unusable_input_file_is_named(
    broken: str, how: str, baseline: Baseline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / ("catalog.yaml" if broken == "catalog" else f"{broken}.json")
    if how == "directory":
        bad.mkdir()
    elif how == "empty":
        bad.write_bytes(b"")
    elif how == "not-utf8":
        bad.write_bytes(b"\xff\xfe{\x00")
    reason = {"missing": "no such file", "directory": "is a directory", "empty": "", "not-utf8": "not UTF-8"}[how]
    inputs = {"workflow": BLAST, "catalog": CATALOG, "plan": baseline.blast_plan, broken: bad}
    ran = 0
    for argv in _commands(tmp_path, inputs["workflow"], inputs["catalog"], inputs["plan"]):
        if bad not in argv:
            continue
        run = _cli(capsys, *argv)
        assert run.code == 2
        assert run.err.startswith(f"agora: error: {bad}: "), run.err
        assert reason in run.err
        assert not (tmp_path / "out").exists()
        ran += 1
    assert ran


def test_a_plan_for_another_workflow_is_refused_naming_both(
    baseline: Baseline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other-workflow.json"
    other.write_bytes(BLAST.read_bytes())
    run = _validate(capsys, baseline.blast_plan, other, CATALOG)
    assert run.code == 2
    assert "'blast-chameleon-small-001'" in run.err and "'other-workflow'" in run.err
    assert run.out == ""


@pytest.mark.parametrize(
    ("token", "error", "expected"),
    [
        ("NaN", InputFileError, "NaN is not a valid JSON number"),
        ("-Infinity", InputFileError, "-Infinity is not a valid JSON number"),
        ("1e999", FieldError, "expected a finite number"),
        ("1" + "0" * 400, FieldError, "absurd"),
        ("1" * 5000, InputFileError, "invalid JSON"),
        ('"12.5"', None, ""),
        ('"ten"', FieldError, "expected a number, got 'ten'"),
        ("-3", FieldError, "must be >= 0"),
    ],
)
def test_a_raw_runtime_token_is_read_or_refused(
    token: str, error: type[AgoraError] | None, expected: str, tmp_path: Path
) -> None:
    document = _v14_with(work_ID02={"runtimeInSeconds": "__TOKEN__"})
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(document).replace('"__TOKEN__"', token), encoding="utf-8")
    if error is None:
        assert load_workflow(path).by_id["work_ID02"].runtime_s == 12.5
        return
    with pytest.raises(error) as caught:
        load_workflow(path)
    assert str(path) in str(caught.value) and expected in str(caught.value)
    if error is FieldError:
        assert "workflow.tasks[1].runtimeInSeconds" in str(caught.value)


def test_a_lone_surrogate_in_a_task_name_is_refused(
    baseline: Baseline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _v14_with(work_ID03={"name": "__TOKEN__"})
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(document).replace('"__TOKEN__"', '"work_\\ud800"'), encoding="utf-8")
    with pytest.raises(FieldError, match=r"workflow\.tasks\[2\]\.name") as caught:
        load_workflow(path)
    assert str(path) in str(caught.value)
    plan = baseline.blast_plan_doc
    plan["assignments"][0]["task"] = "__TOKEN__"
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan).replace('"__TOKEN__"', '"\\udfff"'), encoding="utf-8")
    run = _validate(capsys, plan_path, BLAST, CATALOG)
    assert run.code == 2 and "assignments[0].task" in run.err


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("resources[0].speed", 5e-324, "must be >= 0.001"),
        ("resources[0].billing.granularity_s", 1e-300, "must be >= 0.001"),
        ("network.bandwidth_bytes_per_s", 0.5, "must be >= 1"),
        ("resources[0].vcpus", 10**400, "absurd"),
    ],
)
def test_catalog_numbers_that_divide_or_overflow_are_refused(
    field: str, value: float, reason: str, tmp_path: Path
) -> None:
    document = copy.deepcopy(CATALOG_DOC)
    node: Any = document
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", field)]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(FieldError) as caught:
        load_catalog(path)
    assert str(caught.value).startswith(f"{path}: field '{field}': ") and reason in str(caught.value)


def test_an_unwritable_out_path_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    out = blocker / "plan.json"
    run = _cli(capsys, "optimize", BLAST, "-c", CATALOG, "-o", out, *QUICK)
    assert run.code == 2 and str(out) in run.err


def test_an_impossible_deadline_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "plan.json"
    run = _cli(capsys, "optimize", BLAST, "-c", CATALOG, "-o", out, "--deadline-s", "1", *QUICK)
    assert run.code == 2 and "deadline" in run.err and "'blast-chameleon-small-001'" in run.err
    _assert_nothing_written(out)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"workflow": "a$\\frac$b"}, id="mathtext-in-workflow-name"),
        pytest.param({"task": "x$^$y"}, id="mathtext-in-task-name"),
        pytest.param({"machine": "c6i.large#" + "9" * 5000}, id="5000-digit-machine-number"),
    ],
)
def test_gantt_draws_plans_with_odd_names(
    change: dict[str, str], baseline: Baseline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = baseline.blast_plan_doc
    if "workflow" in change:
        plan.update(change)
    else:
        plan["assignments"][0].update(change)
    path = _write_json(tmp_path / "plan.json", plan)
    run = _cli(capsys, "gantt", path, "-o", tmp_path / "chart.svg")
    assert run.code == 0
