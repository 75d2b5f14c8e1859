"""The queue_waits table: rows recorded at submit time, waits filled in from accounting."""

from __future__ import annotations

import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from agora_optimizer.model.catalog import GIB
from agora_optimizer.queue_wait.features import QueueFeatures
from agora_optimizer.queue_wait.recorder import (
    QueueWaitStore,
    QueueWaitStoreError,
    default_store_url,
    record_submission,
    update_waits,
)
from agora_optimizer.slurm.accounting import QueueWaitRecord, Unstarted
from agora_optimizer.slurm.queue import QueueSnapshot
from tests.slurm_cluster import SlurmCluster, sbatch, scancel
from tests.slurm_fixtures import RecordedRun


def test_every_recorded_job_got_its_wait(recorded_run: RecordedRun) -> None:
    store = QueueWaitStore(recorded_run.store_url)
    observations = store.observations()
    assert [o.job_id for o in observations] == list(recorded_run.job_ids)  # oldest first
    assert store.counts() == {"started": len(recorded_run.job_ids)}
    for o in observations:
        assert o.wait_s >= 0
        assert o.features.partition == recorded_run.partitions[o.job_id]
        assert o.recorded_at.tzinfo is not None
    # sixteen jobs asking 60 cores in all, at once, on 8 cores: the later ones met a queue and waited
    assert max(o.features.pending_jobs + o.features.other_pending_jobs for o in observations) >= 1
    assert max(o.wait_s for o in observations) >= 1.0
    assert {"debug", "compute"} == {o.features.partition for o in store.observations()}
    assert all(o.features.partition == "debug" for o in store.observations(partition="debug"))


def test_the_table_is_named_queue_waits_with_a_column_per_feature(recorded_run: RecordedRun) -> None:
    columns = {c["name"] for c in inspect(create_engine(recorded_run.store_url)).get_columns("queue_waits")}
    assert set(QueueFeatures.__dataclass_fields__) <= columns
    assert {"job_id", "recorded_at", "wait_s", "outcome", "started_at"} <= columns


def test_a_job_cancelled_while_pending_is_marked_never_started(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    store = QueueWaitStore(f"sqlite:///{tmp_path / 'w.db'}")
    job_id = sbatch("-p", "debug", "--hold", "-c", "1", "--mem=100M", "-t", "1")
    record_submission(store, job_id, "debug", 1, 100 * 2**20, 60.0)
    first = update_waits(store)
    assert (first.started, first.never_started, first.still_waiting) == (0, 0, 1)
    scancel(job_id)
    for _ in range(40):
        if update_waits(store).never_started:
            break
        time.sleep(0.5)
    assert store.counts() == {"never_started": 1}
    assert store.observations() == []
    assert update_waits(store).source == "nothing to ask"


def _features(partition: str = "debug") -> QueueFeatures:
    snapshot = QueueSnapshot(taken_at=datetime.now(UTC), jobs=(), source="test")
    return QueueFeatures.from_snapshot(snapshot, partition, 2, GIB, 60.0)


def test_adding_the_same_job_twice_keeps_one_row(tmp_path: Path) -> None:
    store = QueueWaitStore(f"sqlite:///{tmp_path / 'w.db'}")
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert store.add("77", _features(), at, "test") is True
    assert store.add("77", _features(), at, "test") is False
    assert store.waiting() == [("77", at)]


def test_a_reused_job_id_is_matched_by_its_submit_time(tmp_path: Path) -> None:
    store = QueueWaitStore(f"sqlite:///{tmp_path / 'w.db'}")
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    store.add("5", _features(), at, "test")
    old = QueueWaitRecord("5", "debug", "COMPLETED", datetime(2029, 1, 1, tzinfo=UTC), None,
                          datetime(2029, 1, 1, 0, 1, tzinfo=UTC), None, 2, GIB, 60.0)  # fmt: skip
    assert store.resolve([old]) == (0, 0)
    assert store.resolve([], [Unstarted("5", "PENDING")]) == (0, 0)
    new = QueueWaitRecord("5", "debug", "COMPLETED", at, at, at.replace(second=35), None, 2, GIB, 60.0)
    assert store.resolve([old, new]) == (1, 0)
    assert [o.wait_s for o in store.observations()] == [30.0]


def test_default_store_is_sqlite_under_airflow_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    assert default_store_url() == f"sqlite:///{tmp_path / 'agora' / 'queue_waits.db'}"
    QueueWaitStore().close()
    assert (tmp_path / "agora" / "queue_waits.db").is_file()


def test_a_password_in_the_url_is_not_shown() -> None:
    with pytest.raises(QueueWaitStoreError) as caught:
        QueueWaitStore("postgresql+psycopg://agora:s3cret@127.0.0.1:1/agora")
    assert "s3cret" not in str(caught.value) and "agora:***@127.0.0.1:1" in str(caught.value)


@pytest.mark.slow
def test_a_postgresql_server_that_never_answers_fails_the_store_within_its_busy_timeout() -> None:
    """The SLURM backend opens this store right after sbatch: a server that took the connection and never
    answered held it there for good (no connect timeout); now it gives up after its busy timeout, 5 s."""
    outcome: list[BaseException | None] = []

    def open_store(url: str) -> None:
        try:
            QueueWaitStore(url).close()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with socket.socket() as silent:  # takes connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"postgresql+psycopg://agora:pw@127.0.0.1:{silent.getsockname()[1]}/agora"
        opening = threading.Thread(target=open_store, args=(url,), daemon=True)
        opening.start()
        opening.join(15.0)
        assert not opening.is_alive(), "QueueWaitStore still waits for a silent server after 15 s"
    [error] = outcome
    assert isinstance(error, QueueWaitStoreError) and "cannot open" in str(error) and "timeout" in str(error)


def test_an_unreachable_database_is_an_error_naming_its_url(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(QueueWaitStoreError, match=r"queue-wait store sqlite:///.*file/sub/w\.db"):
        QueueWaitStore(f"sqlite:///{tmp_path / 'file' / 'sub' / 'w.db'}")
