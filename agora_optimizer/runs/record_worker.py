"""The run recorder's thread: DAG runs are recorded beside the scheduler's loop, never inside it.

Airflow calls the run listener (:class:`agora_optimizer.runs.recorder.RunListener`) inside the
scheduler's loop, before it commits the run's end. Recording there held the loop for as long as
another process held the trace store's lock (finding 2 of issue 32: 7.5 s for a lock held 6 s,
and up to the store's 60 s busy timeout). So the listener only hands the run's key to
:meth:`RecordWorker.submit`, which never waits, and one daemon thread records the runs in turn:

- it keeps each run on disk (:mod:`agora_optimizer.runs.pending`) while it tries it, and
  discharges it once recorded: a try that fails (the store locked past its short busy timeout,
  or down) leaves it there, and what waits there is tried again every ``retry_interval_s``;
- a run Airflow has not committed as ended yet is tried again a moment later (for at most
  ``commit_wait_s``; then it waits on disk like a failed one);
- the queue holds at most ``queue_max`` runs: beyond, a run goes straight to disk (the one
  write the caller makes, a small local file, and only when the thread is that far behind);
- :meth:`RecordWorker.stop` (the scheduler stops, or the process exits) lets the thread finish
  the run in hand, within ``stop_timeout_s``, and keeps what is still queued on disk.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from agora_optimizer.errors import first_line
from agora_optimizer.runs.pending import EndedRun, discharge, keep, waiting

log = logging.getLogger(__name__)

Outcome = Literal["recorded", "unfinished", "gone"]
QUEUE_MAX = 1024  # runs waiting for the thread; beyond, they wait on disk
RETRY_INTERVAL_S = 5.0  # how often runs waiting on disk are tried again
COMMIT_WAIT_S = 10.0  # how long a run may stay unfinished in Airflow's database after its listener was called
STOP_TIMEOUT_S = 5.0  # how long a stop waits for the run in hand
_FIRST_COMMIT_WAIT_S = 0.05  # then doubled, up to _LONGEST_COMMIT_WAIT_S
_LONGEST_COMMIT_WAIT_S = 1.0


class RecordWorker:
    """One thread that calls ``record`` on each submitted run (see the module's docstring).

    ``record(run)`` records the run and says how it went ("unfinished": Airflow's database does not
    show it ended yet; "gone": it is not there at all), or raises: then the run waits on disk.
    ``close`` is called on the thread when it ends. ``directory``: where runs wait (default
    ``STATE_DIR/.run-spool``).
    """

    def __init__(
        self,
        record: Callable[[EndedRun], Outcome],
        close: Callable[[], None] | None = None,
        *,
        directory: Path | None = None,
        queue_max: int = QUEUE_MAX,
        retry_interval_s: float = RETRY_INTERVAL_S,
        commit_wait_s: float = COMMIT_WAIT_S,
    ) -> None:
        self._record = record
        self._close = close
        self._directory = directory
        self._retry_interval_s = retry_interval_s
        self._commit_wait_s = commit_wait_s
        self._queue: queue.Queue[EndedRun | None] = queue.Queue(maxsize=max(1, queue_max))  # None: wake up
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agora-run-recorder", daemon=True)
        self._thread.start()

    def submit(self, run: EndedRun) -> None:
        """Hand ``run`` to the thread; never waits for it (a full queue, or a stopped worker, keeps it on disk)."""
        if not self._stopping.is_set():
            try:
                self._queue.put_nowait(run)
                return
            except queue.Full:
                log.warning("agora: %d DAG runs wait to be recorded; %s/%s waits on disk", self._queue.maxsize,
                            run.dag_id, run.run_id)  # fmt: skip
        self._keep(run)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Stop the thread (it finishes the run in hand, within ``timeout_s``) and keep what is still queued
        on disk; how many runs were kept."""
        self._stopping.set()
        with contextlib.suppress(queue.Full):  # a full queue: the thread is busy, and looks at the flag next
            self._queue.put_nowait(None)
        self._thread.join(timeout_s)
        kept = 0
        while True:
            try:
                run = self._queue.get_nowait()
            except queue.Empty:
                break
            if run is not None:
                kept += self._keep(run)
        if kept:
            log.info("agora: %d DAG runs not recorded yet wait on disk for the next recorder", kept)
        return kept

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        next_retry_at = time.monotonic()  # at once: what an earlier recorder left on disk
        try:
            while not self._stopping.is_set():
                if time.monotonic() >= next_retry_at:
                    self._retry_waiting()
                    next_retry_at = time.monotonic() + self._retry_interval_s
                try:
                    run = self._queue.get(timeout=max(0.0, next_retry_at - time.monotonic()))
                except queue.Empty:
                    continue
                if run is not None:
                    self._record_kept(run)
        finally:
            if self._close is not None:
                try:
                    self._close()
                except Exception:
                    log.exception("agora: the run recorder could not close its store")

    def _record_kept(self, run: EndedRun) -> None:
        """Record ``run``, kept on disk meanwhile, waiting a little for Airflow to commit its end."""
        self._keep(run)
        deadline = time.monotonic() + self._commit_wait_s
        wait_s = _FIRST_COMMIT_WAIT_S
        while (outcome := self._try(run)) == "unfinished":
            if time.monotonic() + wait_s > deadline or self._stopping.wait(wait_s):
                return  # still not ended in Airflow's database: it waits on disk
            wait_s = min(2 * wait_s, _LONGEST_COMMIT_WAIT_S)
        if outcome is not None:
            self._discharge(run)

    def _retry_waiting(self) -> None:
        """Try the runs waiting on disk, oldest first, until one fails (the rest wait for the next retry)."""
        try:
            runs = waiting(self._directory)
        except Exception:
            log.exception("agora: cannot read the DAG runs waiting to be recorded")
            return
        for run in runs:
            if self._stopping.is_set():
                return
            outcome = self._try(run)
            if outcome is None:
                return
            if outcome != "unfinished":  # an unfinished run waits until it ends (and is submitted again)
                self._discharge(run)

    def _try(self, run: EndedRun) -> Outcome | None:
        """``record(run)``; None when it failed (logged in one line)."""
        try:
            outcome = self._record(run)
        except Exception as exc:
            log.warning(
                "agora: cannot record DAG run %s/%s now (%s: %s); it waits to be tried again",
                run.dag_id, run.run_id, type(exc).__name__, first_line(exc),
            )  # fmt: skip
            return None
        if outcome == "gone":
            log.info("agora: DAG run %s/%s is no longer in Airflow's database; not recorded", run.dag_id, run.run_id)
        return outcome

    def _keep(self, run: EndedRun) -> int:
        try:
            keep(run, self._directory)
            return 1
        except Exception as exc:  # lost until `agora runs record`, which re-records every finished run
            log.error(
                "agora: cannot keep DAG run %s/%s to record later (%s: %s); `agora runs record` records it",
                run.dag_id, run.run_id, type(exc).__name__, first_line(exc),
            )  # fmt: skip
            return 0

    def _discharge(self, run: EndedRun) -> None:
        try:
            discharge(run, self._directory)
        except Exception as exc:  # recorded: at worst it is recorded again, the same
            log.warning("agora: cannot discharge DAG run %s/%s (%s)", run.dag_id, run.run_id, exc)
