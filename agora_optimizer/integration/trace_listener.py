"""The Airflow listener that records one trace row per task attempt, from inside the task process.

Registered by :class:`agora_optimizer.plugin.AgoraPlugin`. When a task
instance starts running (``on_task_instance_running``, called by the Task SDK in the
task process), it starts a :class:`ProcessTreeSampler` on the task process; when the
attempt succeeds or fails it stops the sampler and writes one :class:`TaskAttempt`
(peak RSS, CPU time, times, host, operator, error text; for a mapped task, its map index and how many
instances it has in the run, :func:`map_width`) to the trace store named by
``[agora] trace_store_url``.

Under the agora executor the agora worker already samples the task's process tree (and
kills it over its memory): it says so with ``$AGORA_SAMPLED_BY_WORKER``, and the
listener then does not sample a second time. Its row leaves peak RSS and CPU time empty,
and the executor's row for the same attempt, written when the worker's result is in,
fills them with the worker's measure (:func:`agora_optimizer.executor.jobs.records.executor_attempt`).

Where the attempt ran: ``$AGORA_RESOURCE_TYPE`` / ``$AGORA_BACKEND`` when the
machine's environment says so (the agora executor sets them, and ``$AGORA_MACHINE`` and
``$AGORA_PLAN_VERSION``: where it ran the task, which a run's own plan or a repair may change), else the task's
``executor_config={"agora": {"resource_type": ..., "backend": ...}}``, else a
non-default queue name as the resource type. The host is the machine's, except under a Celery
worker, whose name it is (``pool_small@node1``: :func:`agora_optimizer.integration.celery_pools.worker_name`).

What the attempt read: ``executor_config["agora"]["input_bytes"]`` / ``["input_files"]`` evaluated
with the run's context (a template rendered, a callable called), else the sizes of its local inlets
(:mod:`agora_optimizer.integration.task_inputs`), else what its upstream tasks' rows of the same run say they
wrote (``output_bytes``); a value that cannot be a size is logged and left empty. What a successful attempt
wrote: the sizes of its outlets that name a local file or directory, measured as it ends, as inlets are sized
(``output_bytes``, ``output_files``; :func:`read_outputs`): what its downstream tasks then read.

A listener runs inside the task: every hook swallows and logs its own errors, so a
trace store that is down or a bad row never fails the task. State changes reported
outside a task process (an API server marking a task failed) are not attempts and
are ignored.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.listeners import hookimpl

from agora_optimizer.errors import first_line
from agora_optimizer.integration.celery_pools import worker_name
from agora_optimizer.integration.task_inputs import (
    INPUT_FIELDS,
    inlet_sizes,
    named_uris,
    run_inputs,
    says_nothing,
    upstream_outputs,
)
from agora_optimizer.model.placement import BACKEND_ENV, MACHINE_ENV, PLAN_VERSION_ENV
from agora_optimizer.model.placement import RESOURCE_ENV as RESOURCE_TYPE_ENV
from agora_optimizer.model.task_hints import declared_category as category_of
from agora_optimizer.model.task_hints import task_agora_config
from agora_optimizer.traces.records import AttemptState, TaskAttempt, TraceRecordError
from agora_optimizer.traces.sampler import SAMPLED_BY_WORKER_ENV, ProcessTreeSampler, Sample

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 4000
LISTENER_REPLAY_ROWS = 20  # spooled rows a task process writes after its own, once the store answers

_Key = tuple[str, str, str, int, int]


class TraceListener:
    """Samples each task attempt of this process and writes it to the trace store."""

    def __init__(self, store_url: str | None = None, interval_s: float = 0.1) -> None:
        self.store_url = store_url
        self.interval_s = interval_s
        self._running: dict[_Key, ProcessTreeSampler] = {}

    @hookimpl
    def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
        try:
            key = _key(task_instance)
            old = self._running.pop(key, None)
            if old is not None:
                old.stop()
            if os.environ.get(SAMPLED_BY_WORKER_ENV):
                return  # the agora worker samples this tree; the executor records its measure
            self._running[key] = ProcessTreeSampler(interval_s=self.interval_s).start()
        except Exception:
            log.exception("agora: cannot start sampling task instance %s", _describe(task_instance))

    @hookimpl
    def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
        self._finish(task_instance, "success", None)

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any) -> None:
        self._finish(task_instance, "failed", error)

    @hookimpl
    def on_task_instance_skipped(self, previous_state: Any, task_instance: Any) -> None:
        try:  # a skip is not an attempt worth learning from: stop sampling, write nothing
            sampler = self._running.pop(_key(task_instance), None)
            if sampler is not None:
                sampler.stop()
        except Exception:
            log.exception("agora: cannot stop sampling task instance %s", _describe(task_instance))

    def _finish(self, task_instance: Any, state: AttemptState, error: Any) -> None:
        try:
            sampler = self._running.pop(_key(task_instance), None)
            if sampler is None and not _in_task_process(task_instance):
                return  # e.g. the API server marking a task instance: no attempt ran here
            sample = sampler.stop() if sampler is not None else None
            attempt = attempt_from_task_instance(task_instance, state, error, sample)
            self._write(attempt, sized_by_upstream(task_instance, attempt))
        except TraceRecordError as exc:
            log.warning("agora: trace row skipped: %s", exc)
        except Exception:
            log.exception("agora: cannot record the trace of task instance %s", _describe(task_instance))

    def _write(self, attempt: TaskAttempt, upstream: Sequence[str] = ()) -> None:
        """Write the row, then a few that wait in the spool; a store that is down, or locked past the hooks'
        short busy timeout, does not hold the task: the row waits in the spool instead. ``upstream``: the
        tasks whose recorded outputs in this run are what the attempt read (:func:`sized_by_upstream`)."""
        from agora_optimizer.traces.store import HOOK_BUSY_TIMEOUT_S, TraceStore, default_store_url

        try:
            store = TraceStore(self.store_url or default_store_url(), busy_timeout_s=HOOK_BUSY_TIMEOUT_S)
        except Exception as exc:
            self._spool(attempt, exc)
            return
        with store:
            try:
                if upstream:
                    attempt = _with_upstream_outputs(store, attempt, upstream)
                report = store.add([attempt])
            except Exception as exc:
                self._spool(attempt, exc)
                return
            for problem in report.skipped:
                log.warning("agora: trace row skipped: %s", problem)
            if report.written:
                measure = _measure(attempt)
                log.info("agora: recorded %s (%s, %s) in %s", attempt.key, attempt.state, measure, store.masked_url)
            self._replay_spool(store)

    @staticmethod
    def _spool(attempt: TaskAttempt, exc: Exception) -> None:
        from agora_optimizer.traces.spool import spool

        kept = spool(attempt, "listener")
        log.warning(
            "agora: cannot record the trace of task instance %s now (%s: %s); the row waits in %s",
            attempt.key, type(exc).__name__, first_line(exc), kept,
        )  # fmt: skip

    @staticmethod
    def _replay_spool(store: Any) -> None:
        """The store answers again: write rows that wait in the spool (a few, so the task is not held up).

        The AgoraExecutor replays the spool too; this covers deployments that run tasks on other executors.
        """
        from agora_optimizer.traces.spool import replay, spool_path

        try:
            if spool_path().is_dir():
                replay(store, limit=LISTENER_REPLAY_ROWS)
        except Exception as exc:  # they wait for the next writer
            log.warning("agora: cannot write the trace rows waiting in the spool now (%s)", first_line(exc))


def attempt_from_task_instance(
    task_instance: Any, state: AttemptState, error: Any, sample: Sample | None
) -> TaskAttempt:
    """The :class:`TaskAttempt` of a (runtime) task instance that just ended; raises ``TraceRecordError``."""
    task = getattr(task_instance, "task", None)
    resource_type, backend = resource_of(task_instance)
    started_at = _aware(getattr(task_instance, "start_date", None))
    ended_at = _aware(getattr(task_instance, "end_date", None)) or datetime.now(UTC)
    if started_at is not None and ended_at < started_at:
        ended_at = started_at  # clocks of the API server and the worker may disagree by a little
    if isinstance(error, MemoryError):
        state = "oom_killed"
    elif error is not None and type(error).__name__ == "AirflowTaskTerminated":
        state = "cancelled"
    return TaskAttempt.create(
        dag_id=str(task_instance.dag_id),
        task_id=str(task_instance.task_id),
        run_id=str(task_instance.run_id),
        try_number=int(task_instance.try_number or 1),
        map_index=_map_index(task_instance),
        map_width=map_width(task_instance),
        operator=_operator_name(task),
        category=declared_category(task_instance),
        resource_type=resource_type,
        backend=backend,
        host=worker_name() or str(getattr(task_instance, "hostname", None) or socket.getfqdn()),
        started_at=started_at,
        ended_at=ended_at,
        peak_rss_bytes=sample.peak_rss_bytes if sample is not None else None,
        cpu_time_s=sample.cpu_time_s if sample is not None else None,
        state=state,
        error_text=_error_text(error),
        **_planned(task_instance),
        **read_inputs(task_instance),
        **(read_outputs(task_instance) if state == "success" else {}),
    )


def read_inputs(task_instance: Any) -> dict[str, int | None]:
    """``input_bytes`` and ``input_files`` of the attempt ({} when the task says nothing it can be sized by, or
    says it wrongly: logged, never raised, the attempt is recorded without them)."""
    task = getattr(task_instance, "task", None)
    if task is None:
        return {}
    try:
        declared = any(name in _agora_config(task_instance) for name in INPUT_FIELDS)
        context = task_instance.get_template_context() if declared else {}
        inputs = run_inputs(task, context, str(task_instance.dag_id))
    except Exception as exc:  # a FieldError names the DAG, task and field; anything else is the DAG's code's
        log.warning("agora: %s recorded without its input size: %s", _describe(task_instance), first_line(exc))
        return {}
    for note in inputs.notes:
        log.info("agora: %s: %s", _describe(task_instance), note)
    return {"input_bytes": inputs.input_bytes, "input_files": inputs.input_files}


def read_outputs(task_instance: Any) -> dict[str, int | None]:
    """``output_bytes`` and ``output_files`` of a successful attempt: the sizes of its outlets that name a local
    file or directory, measured now ({} when none does; logged, never raised)."""
    try:
        outlets = named_uris(getattr(getattr(task_instance, "task", None), "outlets", None))
        outputs = inlet_sizes(outlets, role="outlet")
    except Exception as exc:  # an outlet that cannot be read must not hold the task up
        log.warning("agora: %s recorded without its output size: %s", _describe(task_instance), first_line(exc))
        return {}
    for note in outputs.notes:
        log.info("agora: %s: %s", _describe(task_instance), note)
    if outputs.input_bytes is None:
        return {}
    return {"output_bytes": outputs.input_bytes, "output_files": outputs.input_files}


def sized_by_upstream(task_instance: Any, attempt: TaskAttempt) -> tuple[str, ...]:
    """The upstream task ids whose outputs in this run the attempt read, when nothing else says what it read
    (no declared size, no inlet): as planning reads the task (:func:`~agora_optimizer.integration.task_inputs.
    planned_inputs`). Empty when the attempt's size is known or the task has no upstream task."""
    task = getattr(task_instance, "task", None)
    if attempt.input_bytes is not None or task is None or not says_nothing(task):
        return ()
    return tuple(sorted(str(name) for name in getattr(task, "upstream_task_ids", None) or ()))


def _with_upstream_outputs(store: Any, attempt: TaskAttempt, upstream: Sequence[str]) -> TaskAttempt:
    """``attempt`` with the sum of what its upstream tasks wrote in its run, where the store recorded it."""
    from dataclasses import replace

    rows = [row for name in upstream for row in store.attempts(attempt.dag_id, name, run_id=attempt.run_id)]
    inputs = upstream_outputs(attempt.dag_id, upstream, rows)
    if inputs.input_bytes is None:
        return attempt
    return replace(attempt, input_bytes=inputs.input_bytes, input_files=inputs.input_files)


def _planned(task_instance: Any) -> dict[str, str]:
    """The planned ``machine`` and ``plan_version`` of the attempt: the AgoraExecutor's (``$AGORA_PLAN_VERSION``,
    ``$AGORA_MACHINE``), else from the placement the policy wrote (a mapped task's instance: its own, else the
    mapped task's overflow placement)."""
    from agora_optimizer.model.placement import placement_node

    if PLAN_VERSION_ENV in os.environ:
        return {"machine": os.environ.get(MACHINE_ENV, ""), "plan_version": os.environ[PLAN_VERSION_ENV]}
    placement = placement_node(_agora_config(task_instance), _map_index(task_instance))
    if not isinstance(placement, dict):
        return {}
    return {name: _string(placement.get(name)) for name in ("machine", "plan_version")}


def _agora_config(task_instance: Any) -> Mapping[str, Any]:
    """The attempt's task's ``executor_config["agora"]`` ({} where none, or malformed: a listener never raises)."""
    return task_agora_config(getattr(task_instance, "task", None), task_instance)


def declared_category(task_instance: Any) -> str:
    """``executor_config["agora"]["category"]`` where the DAG declares one (else the predictor uses the task id)."""
    return category_of(_agora_config(task_instance))


def resource_of(task_instance: Any) -> tuple[str, str]:
    """(resource type, backend) of the attempt: environment, then executor_config, then queue."""
    task = getattr(task_instance, "task", None)
    agora = _agora_config(task_instance)
    queue = getattr(task, "queue", None) or getattr(task_instance, "queue", None) or ""
    resource_type = os.environ.get(RESOURCE_TYPE_ENV) or _string(agora.get("resource_type"))
    if not resource_type and queue != "default":
        resource_type = _string(queue)
    backend = os.environ.get(BACKEND_ENV) or _string(agora.get("backend"))
    return resource_type, backend


def _string(value: object) -> str:
    """``value`` where it is a string, else "" (a listener never raises: a list in executor_config is no name)."""
    return value if isinstance(value, str) else ""


def _measure(attempt: TaskAttempt) -> str:
    if attempt.peak_rss_bytes is None and os.environ.get(SAMPLED_BY_WORKER_ENV):
        return "peak RSS and CPU from the agora worker"
    return f"peak RSS {attempt.peak_rss_bytes} bytes, CPU {attempt.cpu_time_s} s"


def _key(task_instance: Any) -> _Key:
    return (
        str(task_instance.dag_id),
        str(task_instance.task_id),
        str(task_instance.run_id),
        _map_index(task_instance),
        int(task_instance.try_number or 1),
    )


def _map_index(task_instance: Any) -> int:
    value = getattr(task_instance, "map_index", -1)
    return -1 if value is None else int(value)


def map_width(task_instance: Any) -> int | None:
    """How many instances the attempt's mapped task has in its run (None for an unmapped task, or when Airflow
    cannot say: logged, never raised). Asked of Airflow's API server through the Task SDK
    (``RuntimeTaskInstance.get_ti_count``), not counting the instances a shorter re-expansion removed."""
    index = _map_index(task_instance)
    if index < 0:
        return None
    try:
        from airflow.sdk import TaskInstanceState

        states = [state.value for state in TaskInstanceState if state != TaskInstanceState.REMOVED]
        count = task_instance.get_ti_count(
            dag_id=str(task_instance.dag_id),
            task_ids=[str(task_instance.task_id)],
            run_ids=[str(task_instance.run_id)],
            states=[*states, "null"],  # "null": an instance not yet scheduled
        )
    except Exception as exc:  # outside a task process, or an API server that does not answer
        log.warning("agora: %s recorded without its map width: %s", _describe(task_instance), first_line(exc))
        return None
    return max(int(count), index + 1)  # the attempt itself is one of them


def _operator_name(task: Any) -> str:
    if task is None:
        return ""
    return str(getattr(task, "task_type", "") or type(task).__name__)


def _in_task_process(task_instance: Any) -> bool:
    """True for the Task SDK's runtime task instance (the task process), False for the ORM model."""
    return type(task_instance).__name__ == "RuntimeTaskInstance"


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _error_text(error: Any) -> str:
    if error is None:
        return ""
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _describe(task_instance: Any) -> str:
    try:
        return "/".join(str(part) for part in _key(task_instance))
    except Exception:
        return repr(task_instance)[:200]


trace_listener = TraceListener()
