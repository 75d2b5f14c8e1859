"""The run recorder's thread: a bounded queue that never makes its caller wait, and loses no run.

``record`` here is the worker's one collaborator, a function that says what became of each run; the real
one (Airflow's database and the trace store) is tested with the listener in test_recorder.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agora_optimizer.runs.pending import EndedRun, waiting
from agora_optimizer.runs.record_worker import Outcome, RecordWorker

RUNS = [EndedRun("etl", f"r{i}") for i in range(5)]


class Recorder:
    """Records runs into ``recorded``; holds each call while ``gate`` is closed; answers ``outcomes[run]``
    (a list, one answer per call, the last one repeated) or "recorded"."""

    def __init__(self) -> None:
        self.recorded: list[EndedRun] = []
        self.calls: list[EndedRun] = []
        self.gate = threading.Event()
        self.gate.set()
        self.outcomes: dict[EndedRun, list[Outcome | Exception]] = {}

    def __call__(self, run: EndedRun) -> Outcome:
        self.calls.append(run)
        self.gate.wait(30)
        answers = self.outcomes.get(run, ["recorded"])
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        if answer == "recorded":
            self.recorded.append(run)
        return answer


@pytest.fixture
def stopped_at_the_end() -> Iterator[Callable[[RecordWorker], RecordWorker]]:
    workers: list[RecordWorker] = []
    yield lambda worker: workers.append(worker) or worker  # type: ignore[func-returns-value]
    for worker in workers:
        worker.stop(timeout_s=5)


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_full_queue_sends_runs_to_disk_without_waiting_and_none_is_lost(
    tmp_path: Path, stopped_at_the_end: Callable[[RecordWorker], RecordWorker]
) -> None:
    recorder = Recorder()
    recorder.gate.clear()  # the store is stuck: the thread holds its first run
    worker = stopped_at_the_end(RecordWorker(recorder, directory=tmp_path, queue_max=2, retry_interval_s=0.2))
    worker.submit(RUNS[0])
    _until(lambda: recorder.calls == [RUNS[0]])
    for run in RUNS[1:]:
        started = time.monotonic()
        worker.submit(run)
        assert time.monotonic() - started < 0.1
    # on disk: the run in hand, and the two the full queue turned away; queued: the other two
    assert set(waiting(tmp_path)) == {RUNS[0], RUNS[3], RUNS[4]}
    recorder.gate.set()
    _until(lambda: set(recorder.recorded) == set(RUNS))
    _until(lambda: not waiting(tmp_path))


def test_a_failed_try_waits_on_disk_and_is_tried_again(
    tmp_path: Path, stopped_at_the_end: Callable[[RecordWorker], RecordWorker]
) -> None:
    recorder = Recorder()
    recorder.outcomes[RUNS[0]] = [RuntimeError("trace store locked"), RuntimeError("still locked"), "recorded"]
    worker = stopped_at_the_end(RecordWorker(recorder, directory=tmp_path, retry_interval_s=0.1))
    worker.submit(RUNS[0])
    _until(lambda: recorder.recorded == [RUNS[0]])
    assert recorder.calls == [RUNS[0]] * 3 and not waiting(tmp_path)


def test_a_run_airflow_has_not_committed_is_tried_again_until_it_has_and_a_gone_one_is_dropped(
    tmp_path: Path, stopped_at_the_end: Callable[[RecordWorker], RecordWorker]
) -> None:
    recorder = Recorder()
    recorder.outcomes[RUNS[0]] = ["unfinished", "unfinished", "recorded"]  # the scheduler commits a moment later
    recorder.outcomes[RUNS[1]] = ["gone"]
    recorder.outcomes[RUNS[2]] = ["unfinished"]  # cleared and running again: recorded when it ends again
    worker = stopped_at_the_end(RecordWorker(recorder, directory=tmp_path, retry_interval_s=60, commit_wait_s=0.5))
    for run in RUNS[:3]:
        worker.submit(run)
    _until(lambda: recorder.calls.count(RUNS[2]) >= 2 and waiting(tmp_path) == [RUNS[2]])
    assert recorder.recorded == [RUNS[0]] and recorder.calls.count(RUNS[1]) == 1


def test_stop_keeps_what_is_queued_on_disk_and_the_next_worker_records_it(tmp_path: Path) -> None:
    recorder = Recorder()
    recorder.gate.clear()
    worker = RecordWorker(recorder, directory=tmp_path)
    for run in RUNS[:3]:
        worker.submit(run)
    _until(lambda: recorder.calls == [RUNS[0]])
    started = time.monotonic()
    assert worker.stop(timeout_s=0.2) == 2  # the two queued; the one in hand was kept before it was tried
    assert time.monotonic() - started < 1.0
    assert set(waiting(tmp_path)) == set(RUNS[:3])
    worker.submit(RUNS[3])  # a run that ends after the stop waits on disk too
    recorder.gate.set()
    _until(lambda: not worker.alive)

    following = Recorder()
    next_worker = RecordWorker(following, directory=tmp_path, retry_interval_s=60)
    try:
        _until(lambda: not waiting(tmp_path))
    finally:
        started = time.monotonic()
        next_worker.stop()  # an idle thread wakes up to stop: it does not sleep out its retry interval
        assert time.monotonic() - started < 1.0 and not next_worker.alive
    assert set(following.recorded) == set(RUNS[:4]) - set(recorder.recorded)
