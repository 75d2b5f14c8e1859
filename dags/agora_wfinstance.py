"""Replay a real recorded workflow (WfCommons WfInstances) as an Airflow DAG, scaled down to seconds.

One DAG per workflow named in ``$AGORA_WFINSTANCE`` (default ``blast-chameleon-small-001``;
several names separated by commas give one DAG each), read from ``workflows/<name>.json``
beside this folder (or from ``$AGORA_WORKFLOWS_DIR``) with agora's WfFormat reader.

- DAG id ``agora_wfinstance_<name>``; one task per WfFormat task, its id the WfFormat id
  (characters Airflow refuses become ``_``; see :func:`airflow_task_ids`); dependencies are
  exactly the workflow's edges.
- Each task holds ``memory_bytes * MEMORY_SCALE`` bytes, resident (every page written),
  and burns one core in a busy loop until it has used ``runtime_s * TIME_SCALE`` seconds of
  CPU time (writing the memory counts: a large block takes a while). On a free core that is
  its wall time; on a busy machine it takes longer, as the real task would. Scaled runtimes
  are clamped to [REPLAY_MIN_RUNTIME_S, REPLAY_MAX_RUNTIME_S] and scaled memory is capped at
  REPLAY_MAX_MEMORY_BYTES, so no task is too short to measure or too big for a laptop. The
  scales come from ``$AGORA_WFINSTANCE_TIME_SCALE`` and ``$AGORA_WFINSTANCE_MEMORY_SCALE``, the
  clamps from ``$AGORA_WFINSTANCE_MIN_RUNTIME_S``, ``$AGORA_WFINSTANCE_MAX_RUNTIME_S`` and
  ``$AGORA_WFINSTANCE_MAX_MEMORY_BYTES`` (``bench/run_plans_come_true.py`` scales runtimes into
  5-60 s with them).
- ``$AGORA_WFINSTANCE_LOAD=sleep`` makes each task sleep its ``runtime_s`` (times the slow factor)
  instead of burning CPU, as a task waiting on a remote service does: its wall time is its runtime
  whatever else runs on the host. The loopback SLURM cluster's "nodes" share the host's cores with
  each other and with Airflow; on a real cluster they do not (``bench/run_plans_come_true.py
  --task-load``). Default ``cpu``.
- A DAG run's conf ``{"agora_slow": {"<task id>": 2.0}}`` makes those tasks burn that many times
  their CPU time in that run only (the plan, made from the hints, does not know): how the
  benchmark slows a task on purpose to see a run drift from its plan.
- ``executor_config["agora"]`` carries the scaled ``runtime_s``, the ``memory_bytes`` the task
  process needs (the scaled block plus TASK_PROCESS_BYTES, what Airflow's task process itself
  holds; ``$AGORA_WFINSTANCE_TASK_PROCESS_BYTES``), the
  recorded ``cores`` (the hints agora's planner reads), and the category ``replay:<category>``:
  a replayed task is not the recorded one (its runtime is scaled and clamped), so what the
  shipped model learnt of ``<category>`` from the real runs must not answer for it;
  ``executor_config["agora_wfinstance"]`` carries the task's recorded ``category``, its WfFormat
  ``wf_task_id`` and ``wf_task_name``. They sit in their own key because the planner's reader
  refuses keys it does not know in ``"agora"``.
- ``executor_config["agora"]`` also carries, with or without the hints, the task's ``input_bytes`` and
  ``input_files``: what the recorded task read, as the predictor sizes a WfFormat task
  (:func:`agora_optimizer.traces.wfformat_import.read_workflow_shape`). They are what the task reads, not
  a guess at what it takes: a plan sizes the replayed tasks with them, and the trace listener records them.

A missing workflow file is an import error that names the file and the environment variable.
The bundled workflows are WfCommons WfInstances, LGPL-3.0 (``workflows/README.md``).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from agora_optimizer.io.documents import read_document
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.traces.wfformat_import import read_workflow_shape

WORKFLOW_ENV = "AGORA_WFINSTANCE"
TIME_SCALE_ENV = "AGORA_WFINSTANCE_TIME_SCALE"
MEMORY_SCALE_ENV = "AGORA_WFINSTANCE_MEMORY_SCALE"
MIN_RUNTIME_ENV = "AGORA_WFINSTANCE_MIN_RUNTIME_S"
MAX_RUNTIME_ENV = "AGORA_WFINSTANCE_MAX_RUNTIME_S"
MAX_MEMORY_ENV = "AGORA_WFINSTANCE_MAX_MEMORY_BYTES"
TASK_PROCESS_ENV = "AGORA_WFINSTANCE_TASK_PROCESS_BYTES"
SLOW_CONF_KEY = "agora_slow"
WORKFLOWS_DIR_ENV = "AGORA_WORKFLOWS_DIR"
LOAD_ENV = "AGORA_WFINSTANCE_LOAD"
LOADS = ("cpu", "sleep")
HINTS_ENV = "AGORA_WFINSTANCE_HINTS"
HINTS = ("all", "none")
REPLAY_RETRIES = 2  # without hints: a task killed for memory tries again, with more

DEFAULT_WORKFLOW = "blast-chameleon-small-001"
TIME_SCALE = 0.02  # blast-chameleon-small-001: 383 s of recorded work become about 8 s
MEMORY_SCALE = 0.25  # its largest task: 902 MiB becomes 225 MiB
REPLAY_MIN_RUNTIME_S = 0.05
REPLAY_MAX_RUNTIME_S = 3.0
REPLAY_MAX_MEMORY_BYTES = 256 * 2**20
# What an Airflow 3.3 task process running the replay holds before its block: the agora worker measured
# peaks of 112 to 122 MiB for tasks whose block is under 3 MiB (bench/run_plans_come_true.py, 2026-12-01),
# and a reservation must cover the whole process, or the worker kills it for memory.
TASK_PROCESS_BYTES = 160 * 2**20
# What that process does peak at, besides its block: 119.0 MiB in each of the 44 tries of a real
# srasearch-chameleon-10a-001 replay (--task-load sleep, 2026-12-06: peak minus block, 118.8 to 119.0), and
# in blast's (the results page of bench/run_learning_loop.py). Not a reservation: what a replayed task's
# measured peak is made of, so what the traces a replay is predicted from must say (TASK_PROCESS_BYTES is the
# allowance a hint adds, with room).
TASK_PROCESS_PEAK_BYTES = 119 * 2**20
REPLAY_CATEGORY_PREFIX = "replay:"  # the declared category of a replayed task: not the recorded task itself
PAGE_BYTES = 4096

DAG_ID_PREFIX = "agora_wfinstance_"
MAX_KEY_CHARS = 250  # Airflow's limit on dag and task ids
_REFUSED = re.compile(r"[^A-Za-z0-9_.-]")


def _replay(runtime_s: float, memory_bytes: int, **context: Any) -> None:
    """Hold ``memory_bytes`` resident and keep one core busy until this thread has used ``runtime_s`` of CPU
    (times the run's ``agora_slow`` factor for this task, if its conf sets one); with ``$AGORA_WFINSTANCE_LOAD``
    ``sleep``, sleep that long instead."""
    runtime_s *= _slow_factor(context)
    load = _load()
    block = bytearray(memory_bytes)
    block[::PAGE_BYTES] = b"\x01" * len(range(0, memory_bytes, PAGE_BYTES))  # resident whatever the allocator does
    if load == "sleep":
        time.sleep(runtime_s)
    else:
        deadline = time.thread_time() + runtime_s  # the thread's own CPU time: fixed work, whatever else runs
        while time.thread_time() < deadline:
            pass
    del block


def _retries(hints: str) -> dict[str, Any]:
    """Without hints a task's memory is predicted and may be short: it is killed at its reservation and
    retried, as a user's task would be, with more memory (the executor's retry after a kill, and what the
    run learned of its category); with the recorded values declared, a failure is a failure."""
    return {"retries": REPLAY_RETRIES, "retry_delay": timedelta(seconds=1)} if hints == "none" else {}


def _hints() -> str:
    """``$AGORA_WFINSTANCE_HINTS``: ``all`` (the default) or ``none``."""
    hints = os.environ.get(HINTS_ENV, "").strip() or HINTS[0]
    if hints not in HINTS:
        raise ValueError(f"${HINTS_ENV} must be one of {', '.join(HINTS)}, got {hints!r}")
    return hints


def _load() -> str:
    """``$AGORA_WFINSTANCE_LOAD``: ``cpu`` (the default) or ``sleep``."""
    load = os.environ.get(LOAD_ENV, "").strip() or LOADS[0]
    if load not in LOADS:
        raise ValueError(f"${LOAD_ENV} must be one of {', '.join(LOADS)}, got {load!r}")
    return load


def _slow_factor(context: dict[str, Any]) -> float:
    """The factor ``{"agora_slow": {task_id: factor}}`` of the DAG run's conf sets for this task (else 1)."""
    dag_run, ti = context.get("dag_run"), context.get("ti")
    conf = getattr(dag_run, "conf", None) or {}
    slow = conf.get(SLOW_CONF_KEY) if isinstance(conf, dict) else None
    if not isinstance(slow, dict) or ti is None:
        return 1.0
    factor = slow.get(ti.task_id, 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 100:
        raise ValueError(f"dag run conf {SLOW_CONF_KEY}.{ti.task_id} must be a number in (0, 100], got {factor!r}")
    return float(factor)


def _scale(env: str, default: float) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"${env} must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"${env} must be > 0 and finite, got {text!r}")
    return value


def workflows_dir() -> Path:
    """``$AGORA_WORKFLOWS_DIR``, else ``workflows/`` of the repository that holds this DAG folder."""
    override = os.environ.get(WORKFLOWS_DIR_ENV, "").strip()
    return Path(override).expanduser() if override else Path(__file__).resolve().parents[1] / "workflows"


def _sanitized(text: str) -> str:
    return _REFUSED.sub("_", text) or "_"


def _hashed(text: str, base: str) -> str:
    suffix = "-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return base[: MAX_KEY_CHARS - len(suffix)] + suffix


def airflow_task_ids(wf_ids: list[str]) -> dict[str, str]:
    """Map WfFormat task ids to Airflow task ids: stable, collision-free, independent of file order.

    An id Airflow accepts is kept. Other ids have each refused character replaced by ``_``
    (and are cut to 250 characters); if that makes two ids equal, or equal to an id kept
    as it is, the changed ones get ``-`` and 8 hex digits of the SHA-1 of their WfFormat id.
    """
    wanted = {wf_id: _sanitized(wf_id)[:MAX_KEY_CHARS] for wf_id in wf_ids}
    claimed: dict[str, list[str]] = {}
    for wf_id, airflow_id in wanted.items():
        claimed.setdefault(airflow_id, []).append(wf_id)
    mapping = {}
    for wf_id, airflow_id in wanted.items():
        unchanged = airflow_id == wf_id
        mapping[wf_id] = airflow_id if unchanged or len(claimed[airflow_id]) == 1 else _hashed(wf_id, airflow_id)
    if len(set(mapping.values())) != len(mapping):  # a hashed id equal to a kept one: not seen in practice
        raise ValueError(f"cannot map WfFormat task ids to distinct Airflow task ids: {sorted(wf_ids)[:5]}...")
    return mapping


def _wf_task_names(path: Path) -> dict[str, str]:
    """WfFormat 1.5 ``specification.tasks[].name`` by id (the reader keeps ids only); 1.4 names are ids."""
    workflow = read_document(path).get("workflow", {})  # as load_workflow read it, duplicate keys refused
    spec_tasks = workflow.get("specification", {}).get("tasks", [])
    return {str(item["id"]): str(item.get("name", item["id"])) for item in spec_tasks}


def build_dag(
    name: str,
    directory: Path,
    time_scale: float,
    memory_scale: float,
    runtime_range_s: tuple[float, float] = (REPLAY_MIN_RUNTIME_S, REPLAY_MAX_RUNTIME_S),
    max_memory_bytes: int = REPLAY_MAX_MEMORY_BYTES,
    task_process_bytes: int = TASK_PROCESS_BYTES,
    hints: str = HINTS[0],
) -> DAG:
    """The DAG replaying ``directory/<name>.json``, runtimes clamped to ``runtime_range_s``; ``hints``:
    ``all`` declares each task's scaled runtime and memory, ``none`` its cores and recorded category only;
    both declare its recorded input bytes and files."""
    low_s, high_s = runtime_range_s
    if not 0 < low_s <= high_s:
        raise ValueError(f"${MIN_RUNTIME_ENV} ({low_s:g}) must be > 0 and <= ${MAX_RUNTIME_ENV} ({high_s:g})")
    path = directory / f"{name}.json"
    if not path.is_file():
        bundled = ", ".join(sorted(p.stem for p in directory.glob("*.json"))) or "none"
        raise FileNotFoundError(
            f"no workflow file {path} for ${WORKFLOW_ENV}={name!r} (workflows in {directory}: {bundled}; "
            f"set ${WORKFLOWS_DIR_ENV} to use another folder)"
        )
    workflow = load_workflow(path)
    names = _wf_task_names(path)
    shapes = {shape.task_id: shape for shape in read_workflow_shape(path).tasks}
    ids = airflow_task_ids([t.id for t in workflow.tasks])
    with DAG(
        dag_id=DAG_ID_PREFIX + _sanitized(name),
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["agora", "wfinstance"],
        doc_md=f"Replay of `{path.name}` (WfCommons WfInstances, LGPL-3.0): "
        f"time scale {time_scale:g} (runtimes in [{low_s:g}, {high_s:g}] s), memory scale {memory_scale:g}.",
    ) as dag:
        operators: dict[str, Any] = {}
        for wf_task in workflow.tasks:
            runtime_s = min(max(wf_task.runtime_s * time_scale, low_s), high_s)
            memory_bytes = min(round(wf_task.memory_bytes * memory_scale), max_memory_bytes)
            declared: dict[str, Any] = {
                "cores": wf_task.cores,
                "runtime_s": runtime_s,
                "memory_bytes": memory_bytes + task_process_bytes,
                "category": REPLAY_CATEGORY_PREFIX + wf_task.category,
            }
            if hints == "none":
                declared = {"cores": wf_task.cores, "category": wf_task.category}
            # What the task reads, as the predictor sizes the WfFormat task: not a hint, declared either way.
            shape = shapes[wf_task.id]
            declared |= {"input_bytes": shape.input_bytes, "input_files": shape.input_files}
            config = {
                "agora": declared,
                "agora_wfinstance": {
                    "category": wf_task.category,
                    "wf_task_id": wf_task.id,
                    "wf_task_name": names.get(wf_task.id, wf_task.id),
                },
            }
            replay = task(task_id=ids[wf_task.id], executor_config=config, do_xcom_push=False, **_retries(hints))(
                _replay
            )
            operators[wf_task.id] = replay(runtime_s=runtime_s, memory_bytes=memory_bytes)
        for edge in workflow.edges:
            operators[edge.parent] >> operators[edge.child]
    return dag


def _build_all() -> dict[str, DAG]:
    names = [n.strip() for n in os.environ.get(WORKFLOW_ENV, DEFAULT_WORKFLOW).split(",") if n.strip()]
    time_scale = _scale(TIME_SCALE_ENV, TIME_SCALE)
    memory_scale = _scale(MEMORY_SCALE_ENV, MEMORY_SCALE)
    runtime_range_s = (_scale(MIN_RUNTIME_ENV, REPLAY_MIN_RUNTIME_S), _scale(MAX_RUNTIME_ENV, REPLAY_MAX_RUNTIME_S))
    max_memory = int(_scale(MAX_MEMORY_ENV, REPLAY_MAX_MEMORY_BYTES))
    task_process = int(_scale(TASK_PROCESS_ENV, TASK_PROCESS_BYTES))
    directory = workflows_dir()
    hints = _hints()
    dags = [
        build_dag(name, directory, time_scale, memory_scale, runtime_range_s, max_memory, task_process, hints)
        for name in names or [DEFAULT_WORKFLOW]
    ]
    return {dag.dag_id: dag for dag in dags}


globals().update(_build_all())  # module-level DAG objects: what the DAG processor collects
