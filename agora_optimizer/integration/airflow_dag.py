"""Read a real Airflow DAG from its DAG folder into the tasks and edges agora plans.

No running Airflow is needed: the DAG files are parsed with Airflow's own ``DagBag``, the
way the DAG processor does. A DAG author may declare what a task needs in its
``executor_config``::

    PythonOperator(task_id="train", ..., executor_config={"agora": {"cores": 4, "memory_gib": 8, "runtime_s": 600}})

and ``"gpus": 1`` for a task that needs accelerators (a need, not a hint: the plan puts it only on
a type with as many GPUs, section 5 of the spec). What a task reads (``input_bytes``, ``input_files``,
its inlets) feeds the predictor's size features (:mod:`agora_optimizer.integration.task_inputs`).
Declared runtime and memory are hints: the predictor prefers what the task's own history says and
falls back to them (see :mod:`agora_optimizer.predict.fallback`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.errors import AgoraError, FieldError
from agora_optimizer.integration.dag_shape import DagShape, DagTask
from agora_optimizer.integration.task_inputs import TaskInputs, declared_inputs, planned_inputs
from agora_optimizer.integration.waits import release_waits, waits_without_worker
from agora_optimizer.model.task_hints import (
    DECLARED_KEYS,
    WRITTEN_KEYS,
    declared_needs,
    hint_field,
    task_agora_config,
    unknown_key,
)

if TYPE_CHECKING:
    from agora_optimizer.model.catalog import Catalog
    from agora_optimizer.model.shapes import WorkflowShape
    from agora_optimizer.model.workflow import Workflow
    from agora_optimizer.predict.latency import PlatformLatency
    from agora_optimizer.predict.map_width import MapWidth
    from agora_optimizer.traces.records import TaskAttempt

AIRFLOW_PREFIX = "airflow:"
INPUTS_SHOWN = 10  # tasks whose input sizes agora optimize names (a DAG of thousands would fill a screen)


class DagNotFoundError(AgoraError):
    """The DAG folder does not hold the DAG asked for, or its file does not import."""


def dag_folder() -> Path:
    """``[core] dags_folder`` of the Airflow configuration in effect."""
    from airflow.configuration import conf

    return Path(os.path.expanduser(conf.get("core", "dags_folder")))


def load_dag(dag_id: str, folder: str | Path | None = None) -> DagShape:
    """Parse the DAG folder and return the shape of ``dag_id``; errors name the file or the id."""
    from airflow.dag_processing.dagbag import DagBag

    folder = Path(folder) if folder is not None else dag_folder()
    if not folder.exists():
        raise DagNotFoundError(f"DAG folder {folder} does not exist (set [core] dags_folder or --dag-folder)")
    bag = DagBag(dag_folder=str(folder), safe_mode=False, load_op_links=False)
    dag = bag.dags.get(dag_id)
    if dag is None:
        broken = "; ".join(f"{path}: {_first_line(error)}" for path, error in sorted(bag.import_errors.items()))
        known = ", ".join(sorted(bag.dags)) or "none"
        reason = f"DAG '{dag_id}' is not in {folder} (DAGs found: {known})"
        raise DagNotFoundError(reason + (f"; files that failed to import: {broken}" if broken else ""))
    tasks = tuple(_dag_task(dag.fileloc, task, _closest_mapped_group(task)) for task in dag.tasks)
    return DagShape(dag_id=dag_id, fileloc=str(dag.fileloc), tasks=tasks)


def _first_line(error: object) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else "import failed"


def _dag_task(fileloc: str, task: Any, mapped_group: Any = None) -> DagTask:
    hints = task_agora_config(task)
    unknown = unknown_key(hints)
    if unknown is not None:
        known = ", ".join(sorted(DECLARED_KEYS | WRITTEN_KEYS))
        raise FieldError(fileloc, hint_field(task, unknown), f"unknown key (known: {known})")
    needs = declared_needs(task, fileloc)  # refuses hints that are not a mapping, and a bad value
    return DagTask(
        category=needs.category,
        task_id=task.task_id,
        operator=getattr(task, "task_type", type(task).__name__),
        upstream=tuple(sorted(task.upstream_task_ids)),
        cores=needs.cores,
        gpus=needs.gpus,
        runtime_hint_s=needs.runtime_s,
        memory_hint_bytes=needs.memory_bytes,
        mapped=mapped_group is not None or bool(getattr(task, "is_mapped", False)),
        literal_width=_literal_width(task, mapped_group),
        map_group=str(getattr(mapped_group, "group_id", "") or ""),
        waits=waits_without_worker(task),
        inputs=declared_inputs(task, hints, _dag_named(fileloc, getattr(task, "dag_id", None))),
    )


def _dag_named(fileloc: str, dag_id: object) -> str:
    """``dags/etl.py (DAG 'etl')``: where an error about a task's declared input sizes points."""
    return f"{fileloc} (DAG '{dag_id}')" if isinstance(dag_id, str) and dag_id else fileloc


def _closest_mapped_group(task: Any) -> Any:
    closest = getattr(task, "get_closest_mapped_task_group", None)
    return closest() if callable(closest) else None


def _literal_width(task: Any, group: Any) -> int | None:
    """How many instances the task expands into, when every ``.expand()`` argument is a literal
    (a list, a tuple, a dict) at parse time: the product of their lengths (of the task's own and
    of its mapped task groups'); None when one comes from an upstream task (an XCom)."""
    specified = getattr(task, "_get_specified_expand_input", None)  # a @task's is in its op_kwargs
    inputs = [specified()] if getattr(task, "is_mapped", False) and callable(specified) else []
    if group is not None:
        groups = getattr(task, "iter_mapped_task_groups", None)
        inputs += [getattr(g, "_expand_input", None) for g in (groups() if callable(groups) else [group])]
    width = 1
    for expand_input in inputs:
        count = _input_width(getattr(expand_input, "value", None))
        if count is None:
            return None
        width *= count
    return width if inputs else None


def _input_width(value: Any) -> int | None:
    from airflow.sdk.definitions._internal.expandinput import _needs_run_time_resolution

    if isinstance(value, Mapping):  # .expand(x=[...], y=[...]): the cross product
        width = 1
        for argument in value.values():
            if _needs_run_time_resolution(argument) or not isinstance(argument, Sequence | Mapping):
                return None
            width *= len(argument)
        return width
    if isinstance(value, Sequence) and not isinstance(value, str):  # .expand_kwargs([...])
        return len(value)
    return None


def expand_mapped(shape: DagShape, widths: Mapping[str, MapWidth]) -> DagShape:
    """The DAG with each mapped task replaced by its expected instances ``task[0]`` ... ``task[w-1]``.

    An instance depends on every instance of each mapped parent (Airflow runs a task after all of
    its upstream task's instances), except within one mapped task group, where instance ``i`` of a
    task follows instance ``i`` of its parent in the group. Each instance carries its index and its
    task's planned width (the predictor's ``map_index`` and ``map_width``). A task ``widths`` does not name keeps
    one instance per :data:`agora_optimizer.predict.map_width.MapWidth` default: callers name every
    mapped task (:func:`mapped_widths`).
    """
    from dataclasses import replace

    from agora_optimizer.model.instances import instance_id
    from agora_optimizer.predict.features import task_stem

    by_id = {task.task_id: task for task in shape.tasks}
    names = {
        task.task_id: [instance_id(task.task_id, i) for i in range(widths[task.task_id].width)]
        if task.mapped and task.task_id in widths
        else [task.task_id]
        for task in shape.tasks
    }
    expanded: list[DagTask] = []
    for task in shape.tasks:
        for index, name in enumerate(names[task.task_id]):
            upstream: list[str] = []
            for parent in task.upstream:
                twin = (
                    task.map_group
                    and by_id[parent].map_group == task.map_group
                    and len(names[parent]) == len(names[task.task_id])
                )
                upstream += [names[parent][index]] if twin else names[parent]
            category = task.category or (task_stem(task.task_id) if task.mapped else "")
            instance = replace(task, task_id=name, upstream=tuple(sorted(upstream)), category=category)
            if name != task.task_id:  # an instance: its index and its task's planned width
                instance = replace(instance, map_index=index, map_width=len(names[task.task_id]))
            expanded.append(instance)
    return replace(shape, tasks=tuple(expanded))


def mapped_widths(shape: DagShape, attempts: Iterable[TaskAttempt], default_width: int) -> dict[str, MapWidth]:
    """The planned width of each mapped task of the DAG (:mod:`agora_optimizer.predict.map_width`)."""
    from agora_optimizer.predict.map_width import past_widths, planned_width

    past = past_widths(attempts, shape.dag_id)
    return {
        task.task_id: planned_width(task.task_id, past, task.literal_width, default_width)
        for task in shape.tasks
        if task.mapped
    }


def planned_dag_inputs(shape: DagShape, attempts: Sequence[TaskAttempt] = ()) -> dict[str, TaskInputs]:
    """What each task of the DAG will read in its next run (:func:`~agora_optimizer.integration.task_inputs.
    planned_inputs`: a size given as a template or a callable is the median ``attempts`` recorded)."""
    from agora_optimizer.model.instances import split_instance

    planned: dict[str, TaskInputs] = {}
    for task in shape.tasks:
        name = split_instance(task.task_id)[0]  # a mapped instance reads as its task's runs did
        upstream = [split_instance(parent)[0] for parent in task.upstream]
        planned[task.task_id] = planned_inputs(task.inputs, (shape.dag_id, name), upstream, attempts)
    return planned


def inputs_note(shape: DagShape, planned: Mapping[str, TaskInputs], most: int = INPUTS_SHOWN) -> str:
    """``inputs: extract 2048 bytes in 3 files (inlets), ...``: the sizes a plan was made from, of the first
    ``most`` tasks that say one ("" when none does)."""
    from agora_optimizer.model.instances import split_instance

    said = {split_instance(task.task_id)[0]: planned[task.task_id] for task in shape.tasks}
    shown_inputs = [f"{name} {inputs.describe()}" for name, inputs in said.items() if inputs.source or inputs.notes]
    more = f" and {len(shown_inputs) - most} more tasks" if len(shown_inputs) > most else ""
    return f"inputs: {', '.join(shown_inputs[:most])}{more}" if shown_inputs else ""


def workflow_shape(
    shape: DagShape, attempts: Sequence[TaskAttempt] = (), inputs: Mapping[str, TaskInputs] | None = None
) -> WorkflowShape:
    """The DAG as the predictor sees a workflow before it runs: task ids, operators, hints, edges, and the
    bytes and files each task reads (``inputs``, else :func:`planned_dag_inputs` of ``attempts``)."""
    from agora_optimizer.model.shapes import TaskShape, WorkflowShape
    from agora_optimizer.model.workflow import Edge
    from agora_optimizer.predict.features import task_stem

    planned = inputs if inputs is not None else planned_dag_inputs(shape, attempts)
    tasks = tuple(
        TaskShape(
            task_id=task.task_id,
            category=task.category or task_stem(task.task_id),
            operator=task.operator,
            cores=task.cores,
            gpus=task.gpus,
            dag_id=shape.dag_id,
            hint_runtime_s=task.runtime_hint_s,
            hint_memory_bytes=task.memory_hint_bytes,
            input_bytes=planned[task.task_id].input_bytes or 0,  # 0: unknown, as the features read it
            input_files=planned[task.task_id].input_files or 0,
            map_index=task.map_index,
            map_width=task.map_width,
        )
        for task in shape.tasks
    )
    edges = tuple(Edge(parent, task.task_id) for task in shape.tasks for parent in task.upstream)
    return WorkflowShape(name=shape.dag_id, tasks=tasks, edges=edges, source=shape.fileloc)


def predicted_dag_workflow(
    dag_id: str,
    catalog: Catalog,
    folder: str | Path | None = None,
    store_url: str | None = None,
    model_dir: str | Path | None = None,
    runtime_quantile: float | None = None,
) -> tuple[Workflow, str]:
    """The DAG as a workflow whose tasks carry predicted runtimes and memory, and where they came from.

    The predictor learns from the trace store's attempts when it has any (every DAG's: a
    task's own history, then its category's, answer first); with an empty store it is the
    trained model of ``model_dir`` (default: the shipped one), and the DAG's declared hints
    and the defaults answer for tasks it has never seen. ``runtime_quantile`` (0.9 for p90):
    the runtimes at that quantile (:mod:`agora_optimizer.predict.runtime_quantiles`); ``None``: the
    model's point prediction.
    """
    from agora_optimizer import settings
    from agora_optimizer.predict.errors import EmptyHistoryError
    from agora_optimizer.predict.model_store import default_model_dir, load_predictor
    from agora_optimizer.predict.predictor import Predictor
    from agora_optimizer.traces.store import TraceStore, default_store_url

    url = store_url or default_store_url()
    with TraceStore(url) as store:
        attempts = store.attempts()  # all: an OOM kill's limit is a floor for the task's memory
    from agora_optimizer.integration.usual_path import off_path, without

    dag = load_dag(dag_id, folder)
    left_out = off_path(dag, attempts)  # branches: the path the DAG's runs take most often
    dag = without(dag, [task.task_id for task in left_out])
    widths = mapped_widths(dag, attempts, _default_map_width(settings.get("default_map_width")))
    expanded = expand_mapped(dag, widths)
    inputs = planned_dag_inputs(expanded, attempts)
    shape = workflow_shape(expanded, inputs=inputs)
    predictor: Predictor | None = None
    origin = "no attempts in the trace store"
    if attempts:
        try:
            predictor = Predictor().fit(attempts, catalog)
            used = predictor.training_rows["runtime"]
            origin = f"learned from {used} successful attempts in the trace store (of {len(attempts)})"
        except EmptyHistoryError as exc:  # e.g. every attempt ran on a type this catalog no longer has
            origin = f"the trace store has nothing to learn from for this catalog ({exc})"
    if predictor is None:
        directory = Path(model_dir) if model_dir is not None else default_model_dir()
        predictor = load_predictor(directory)
        origin = f"{origin}; model {directory}"
    prediction = predictor.predict(shape, catalog)
    workflow = predictor.predicted_workflow(shape, catalog, runtime_quantile, prediction)
    sources = prediction.describe_sources()
    if runtime_quantile is not None:
        origin = f"{origin}; {predictor.quantile_note(runtime_quantile)}"
    workflow, waits = release_waits(workflow, catalog, [task.task_id for task in expanded.tasks if task.waits])
    notes = [f"mapped {task}: {width.describe()}" for task, width in sorted(widths.items())]
    notes += [note for note in [inputs_note(expanded, inputs)] if note]
    if waits:
        shown_waits = ", ".join(wait.describe() for wait in waits)
        notes.append(f"waits without a worker, planned as release times of the tasks after them: {shown_waits}")
    if left_out:
        shown = ", ".join(task.describe() for task in left_out)
        notes.append(f"planned on the path its runs take most often, without {shown}")
    return workflow, "; ".join([f"{origin}; answered: {sources}", *notes])


def _default_map_width(value: str) -> int:
    try:
        width = int(value)
    except ValueError:
        width = 0
    if width < 1:
        raise AgoraError(f"[agora] default_map_width must be a whole number of instances >= 1, got {value!r}")
    return width


def learned_platform_latency(
    store_url: str | None,
    edges: Mapping[str, Sequence[tuple[str, str]]],
    statistic: str = "",
    folder: str | Path | None = None,
    *,
    read_folder: bool = True,
) -> PlatformLatency:
    """The platform latency learned from the trace store's attempts (every DAG's), each task counted from its
    parents' end: with the DAGs' ``edges`` (``{dag_id: [(parent, child), ...]}``, the DAG planned, its mapped
    tasks' instances named), and for every other DAG the store has traces of, its edges in the DAG folder
    (``folder``, default ``[core] dags_folder``; parsed only then). A DAG the folder does not know counts its
    tasks from their queued time, which the executor sets when it lets a held task go. A machine's next task
    counts from its task before's end: the executor frees a machine there. ``statistic`` "none"
    (``--platform-latency none``): none learned, no store opened. ``read_folder`` False: no DAG folder is
    read (a workflow file planned without one), the other DAGs count from their queued time."""
    from agora_optimizer.predict.latency import PlatformLatency, learn_latency
    from agora_optimizer.traces.store import TraceStore, default_store_url

    if statistic == "none":
        return PlatformLatency({})

    with TraceStore(store_url or default_store_url()) as store:
        attempts = store.attempts()
    others = {a.dag_id for a in attempts} - set(edges) if read_folder else set()
    return learn_latency(attempts, {**dag_folder_edges(others, folder), **edges}, freed_at_end=True)


def dag_folder_edges(dag_ids: Iterable[str], folder: str | Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """The (upstream, task) ids of each of ``dag_ids`` the DAG folder holds (a mapped task by its task id: its
    instances count from their upstream tasks' last end); none, and nothing parsed, when there is none to look for
    or no folder."""
    wanted = set(dag_ids)
    if not wanted:
        return {}
    folder = Path(folder) if folder is not None else dag_folder()
    if not folder.exists():
        return {}
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(folder), safe_mode=False, load_op_links=False)
    return {
        dag_id: [(upstream, task.task_id) for task in dag.tasks for upstream in sorted(task.upstream_task_ids)]
        for dag_id, dag in bag.dags.items()
        if dag_id in wanted
    }
