"""Read WfCommons WfFormat instances (1.4 and 1.5) as task attempts, and as task shapes.

- :func:`import_wfformat` / :func:`attempts_from_wfformat`: one :class:`TaskAttempt` per
  recorded task execution (``dag_id`` = the file's stem, ``run_id`` = ``"wfinstance"``).
  A task whose record has a bad value (negative runtime, a string for memory...) is skipped
  and counted, with a reason naming the task and field; the good ones are kept.
- :func:`read_workflow_shape`: the workflow as the predictor sees it before it runs (names,
  categories, file sizes, cores, edges), leniently: ``runtimeInSeconds`` and
  ``memoryInBytes`` may be absent (unlike :func:`agora_optimizer.io.wfformat.load_workflow`).

A task's category is its declared ``category``, else its program (``command.program``)
when that is a plain name, else the category derived from its name (``category_of``).
Its input bytes are the summed sizes of its input files, or ``readBytes`` when it lists
none; its input files, how many it lists (an attempt's ``input_files`` is None where it lists
none: ``readBytes`` does not say how many files it read); outputs alike; ``cpu_time_s`` is
``avgCPU`` (a percentage) / 100 * runtime.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agora_optimizer.errors import FieldError
from agora_optimizer.io.documents import Node, is_finite_number
from agora_optimizer.io.wfformat_structure import MAX_FILE_BYTES, Structure, TaskEntry, edges, read_structure
from agora_optimizer.model.shapes import TaskShape, WorkflowShape
from agora_optimizer.model.workflow import MAX_CORES, category_of, shown
from agora_optimizer.traces.records import TaskAttempt, TraceRecordError

log = logging.getLogger(__name__)

RUN_ID = "wfinstance"
_PLAIN_NAME = re.compile(r"^[A-Za-z][\w.+\-]{0,63}$")


@dataclass
class _RawTask:
    """What the file says of one task, before any check of the measured values."""

    task_id: str
    name: str
    category: str
    program: str
    inputs: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    record: dict[str, Any] | None = None
    gpus: int = 0  # the task's ``gpus`` key (the rule of :mod:`agora_optimizer.io.wfformat`)


@dataclass(frozen=True)
class ImportResult:
    """The attempts read from one file, and one reason per task that was skipped."""

    attempts: tuple[TaskAttempt, ...]
    skipped: tuple[str, ...]


def import_wfformat(path: str | Path) -> ImportResult:
    """Read the recorded executions of a WfFormat file; bad task records are skipped, not fatal."""
    source = str(path)
    structure, tasks, hosts = _read(path)
    sizes = structure.sizes
    dag_id = Path(path).stem
    attempts: list[TaskAttempt] = []
    skipped: list[str] = []
    for task in tasks.values():
        if task.record is None:
            skipped.append(f"{source}: task {shown(task.task_id)}: no execution record")
            continue
        try:
            attempts.append(_attempt(dag_id, task, sizes, hosts))
        except (TraceRecordError, FieldError) as exc:
            skipped.append(str(exc))
    return ImportResult(tuple(attempts), tuple(skipped))


def attempts_from_wfformat(path: str | Path) -> list[TaskAttempt]:
    """The attempts of :func:`import_wfformat`; the count of skipped tasks is logged."""
    result = import_wfformat(path)
    if result.skipped:
        log.warning("%s: skipped %d task record(s); first: %s", path, len(result.skipped), result.skipped[0])
    return list(result.attempts)


def read_workflow_shape(path: str | Path, hints: bool = False) -> WorkflowShape:
    """The workflow before it runs: task shapes and edges. Runtimes and memory may be absent.

    ``hints``: give each task the runtime and memory its file records as declared hints.
    """
    source = str(path)
    structure, tasks, _ = _read(path)
    sizes = structure.sizes
    dag_id = Path(path).stem
    shapes = []
    for task in tasks.values():
        record = task.record or {}
        shapes.append(
            TaskShape(
                task_id=task.task_id,
                category=task.category,
                operator=task.program,
                input_bytes=_input_bytes(task, sizes, record),
                output_bytes=_output_bytes(task, sizes, record),
                input_files=len(task.inputs),
                output_files=len(task.outputs),
                cores=_cores(record),
                gpus=task.gpus,
                dag_id=dag_id,
                hint_runtime_s=_positive(record.get("runtimeInSeconds")) if hints else None,
                hint_memory_bytes=_int_or_none(_positive(record.get("memoryInBytes"))) if hints else None,
            )
        )
    return WorkflowShape(dag_id, tuple(shapes), tuple(edges(structure.tasks, sizes, source)), source=source)


# --- reading the document -------------------------------------------------------------------


def _read(path: str | Path) -> tuple[Structure, dict[str, _RawTask], dict[str, int | None]]:
    """The document's structure, its tasks with their records read leniently, and each machine's cores by name."""
    structure = read_structure(path)
    if not structure.tasks:
        raise structure.workflow.fail("has no tasks")
    tasks = {task_id: _raw(entry) for task_id, entry in structure.tasks.items()}
    return structure, tasks, _machines(structure.machines)


def _raw(entry: TaskEntry) -> _RawTask:
    record = None if entry.record is None else dict(entry.record.mapping())
    if record is not None and entry.cores_key == "cores":  # 1.4: its cores and its one machine, as 1.5 says them
        if "cores" in record and "coreCount" not in record:
            record["coreCount"] = record["cores"]
        if isinstance(record.get("machine"), str):
            record["machines"] = [record["machine"]]
    program = _program((record or {}).get("command"))
    category = _category(entry.declared_category, program, entry.name)
    return _RawTask(entry.task_id, entry.name, category, program, entry.inputs, entry.outputs, record, entry.gpus)


def _machines(machines: Node) -> dict[str, int | None]:
    hosts: dict[str, int | None] = {}
    for machine in machines.items():
        name = machine.get("nodeName", None).value
        if isinstance(name, str) and name:
            cpu = machine.get("cpu", {}).value
            count = _number(cpu.get("coreCount", cpu.get("count"))) if isinstance(cpu, dict) else None
            hosts[name] = int(count) if count else None
    return hosts


def _program(command: object) -> str:
    """The program's base name, when the command names a plain program (not a shell script)."""
    if not isinstance(command, dict):
        return ""
    program = command.get("program")
    if not isinstance(program, str) or not program.strip():
        return ""
    first = program.strip().split()[0].rsplit("/", 1)[-1]
    return first if _PLAIN_NAME.match(first) and len(program.split()) == 1 else ""


def _category(declared: object, program: str, name: str) -> str:
    if isinstance(declared, str) and declared.strip():
        return declared.strip()
    return program or category_of(name)


# --- one task -------------------------------------------------------------------------------


def _attempt(dag_id: str, task: _RawTask, sizes: dict[str, int], hosts: dict[str, int | None]) -> TaskAttempt:
    record = task.record or {}
    key = f"{dag_id}/{task.task_id}"
    runtime = _measure(key, record, "runtimeInSeconds")
    if runtime is None:
        raise TraceRecordError(key, "runtimeInSeconds", "is missing")
    memory = _measure(key, record, "memoryInBytes")
    avg_cpu = _measure(key, record, "avgCPU")
    machines = record.get("machines")
    host = machines[0] if isinstance(machines, list) and machines and isinstance(machines[0], str) else ""
    raw_cores = record.get("coreCount")
    cores = _number(raw_cores)
    if raw_cores is not None and (cores is None or not 0 < cores <= MAX_CORES):
        raise TraceRecordError(key, "coreCount", f"must be a number in (0, {MAX_CORES}], got {shown(raw_cores)}")
    return TaskAttempt.create(
        dag_id=dag_id,
        task_id=task.task_id,
        run_id=RUN_ID,
        category=task.category,
        operator=task.program,
        host=host,
        requested_cores=math.ceil(cores) if cores is not None else None,
        runtime_s=float(runtime),
        peak_rss_bytes=math.ceil(memory) if memory else None,
        cpu_time_s=avg_cpu / 100.0 * runtime if avg_cpu is not None else None,
        input_bytes=_input_bytes(task, sizes, record),
        output_bytes=_output_bytes(task, sizes, record),
        input_files=len(task.inputs) if task.inputs else None,
        output_files=len(task.outputs) if task.outputs else None,
    )


def _measure(key: str, record: dict[str, Any], name: str) -> float | None:
    value = record.get(name)
    if value is None:
        return None
    number = _number(value)
    if number is None or number < 0:
        raise TraceRecordError(key, name, f"must be a finite number >= 0, got {shown(value)}")
    return number


def _number(value: object) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None."""
    return float(value) if is_finite_number(value) else None  # type: ignore[arg-type]


def _positive(value: object) -> float | None:
    number = _number(value)
    return number if number is not None and number > 0 else None


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else math.ceil(value)


def _cores(record: dict[str, Any]) -> int:
    cores = _positive(record.get("coreCount"))
    return min(math.ceil(cores), MAX_CORES) if cores else 1


def _input_bytes(task: _RawTask, sizes: dict[str, int], record: dict[str, Any]) -> int:
    if task.inputs:
        return sum(sizes.get(name, 0) for name in task.inputs)
    read = _number(record.get("readBytes"))
    return int(read) if read is not None and 0 <= read <= MAX_FILE_BYTES else 0


def _output_bytes(task: _RawTask, sizes: dict[str, int], record: dict[str, Any]) -> int:
    if task.outputs:
        return sum(sizes.get(name, 0) for name in task.outputs)
    written = _number(record.get("writtenBytes"))
    return int(written) if written is not None and 0 <= written <= MAX_FILE_BYTES else 0
