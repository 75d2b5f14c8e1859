"""sacct and the jobcomp file on jobs that really ran, waited, or were cancelled while pending."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agora_optimizer.slurm.accounting import (
    AccountingRead,
    QueueWaitRecord,
    parse_jobcomp,
    parse_sacct,
    read_jobcomp,
    read_sacct,
    sacct_argv,
)
from agora_optimizer.slurm.commands import run_slurm
from agora_optimizer.slurm.queue import read_snapshot
from tests.slurm_cluster import NODES, SlurmCluster, sbatch, scancel, wait_until

NODE_CPUS = NODES["debug"].cpus


@pytest.fixture(scope="module")
def finished(slurm_cluster: SlurmCluster) -> dict[str, str]:
    """``first`` fills debug's node for 2 s, ``second`` must wait for it; ``cancelled`` never starts."""
    jobs = {"first": sbatch("-p", "debug", f"--cpus-per-task={NODE_CPUS}", "--mem=200M", "-t", "1", command="sleep 2")}
    jobs["second"] = sbatch("-p", "debug", "-c", "1", "--mem=100M", "-t", "1", command="sleep 1")
    jobs["cancelled"] = sbatch("-p", "debug", "--hold", "-c", "1", "--mem=100M", "-t", "1")
    scancel(jobs["cancelled"])

    def all_accounted() -> bool:
        read = read_sacct(jobs.values())
        ended = {r.job_id for r in read.records if r.ended_at is not None}
        gone = {u.job_id for u in read.unstarted if u.finished}
        return ended == {jobs["first"], jobs["second"]} and gone == {jobs["cancelled"]}

    wait_until(all_accounted, 60, "sacct to report the test jobs as finished")
    wait_until(lambda: all(f"JobId={j} " in slurm_cluster.jobcomp.read_text() for j in jobs.values()), 20, "jobcomp")
    return jobs


def by_id(read: AccountingRead) -> dict[str, QueueWaitRecord]:
    return {r.job_id: r for r in read.records}


def test_sacct_records_have_real_times_and_requests(finished: dict[str, str]) -> None:
    read = read_sacct(finished.values())
    records = by_id(read)
    assert read.skipped == ()
    first, second = records[finished["first"]], records[finished["second"]]
    for record in (first, second):
        assert record.started_at >= record.submitted_at
        assert record.ended_at is not None and record.ended_at >= record.started_at
        assert record.wait_s >= 0
        assert record.state == "COMPLETED"
    assert (first.partition, first.cores, first.memory_bytes, first.time_limit_s) == (
        "debug",
        NODE_CPUS,
        200 * 2**20,
        60.0,
    )
    assert (second.partition, second.cores, second.memory_bytes) == ("debug", 1, 100 * 2**20)
    assert first.ended_at - first.started_at >= timedelta(seconds=1)  # type: ignore[operator]
    if first.started_at <= second.submitted_at:  # the node was full when the second job came
        assert second.started_at >= first.ended_at - timedelta(seconds=1)  # type: ignore[operator]
        assert second.wait_s >= 1.0
    cancelled = [u for u in read.unstarted if u.job_id == finished["cancelled"]]
    assert cancelled and cancelled[0].finished and cancelled[0].state == "CANCELLED"


def test_the_jobcomp_file_agrees_with_sacct(slurm_cluster: SlurmCluster, finished: dict[str, str]) -> None:
    from_sacct = by_id(read_sacct(finished.values()))
    from_file = read_jobcomp(slurm_cluster.jobcomp)
    ours = {k: v for k, v in by_id(from_file).items() if k in finished.values()}
    assert ours == {k: v for k, v in from_sacct.items() if k in ours}
    assert set(ours) == {finished["first"], finished["second"]}
    assert finished["cancelled"] in {u.job_id for u in from_file.unstarted if u.finished}


def test_a_malformed_row_is_reported_and_the_good_rows_kept(finished: dict[str, str]) -> None:
    text = run_slurm(sacct_argv(finished.values()))
    lines = text.splitlines()
    broken = lines[0].split("|")
    broken[5] = "yesterday"  # Start
    damaged = "\n".join([*lines, "|".join(broken), "only|three|fields"])
    read = parse_sacct(damaged, source="sacct test")
    assert len(read.records) == len(parse_sacct(text).records) == 2
    assert len(read.skipped) == 2
    assert any("field 'Start'" in reason and "yesterday" in reason for reason in read.skipped)
    assert any("expected 11 fields" in reason for reason in read.skipped)


def test_a_jobcomp_line_without_a_start_time_is_skipped_not_fatal(slurm_cluster: SlurmCluster) -> None:
    text = slurm_cluster.jobcomp.read_text()
    good = [line for line in text.splitlines() if "NodeCnt=1" in line][:1]
    assert good, "the cluster has finished at least the fixture's jobs"
    bad = good[0].replace("SubmitTime=", "SubmitTime=notatime", 1)
    read = parse_jobcomp("\n".join([*good, bad, "garbage"]), source="jobcomp test")
    assert len(read.records) == 1
    assert len(read.skipped) == 2 and "SubmitTime" in read.skipped[0]


def test_running_jobs_have_a_wait_but_no_end(slurm_cluster: SlurmCluster) -> None:
    job = sbatch("-p", "debug", "-c", "1", "--mem=100M", "-t", "1", command="sleep 20")
    try:
        wait_until(lambda: (j := read_snapshot("format").job(job)) is not None and j.state == "running", 60, "start")
        wait_until(lambda: job in by_id(read_sacct([job])), 20, "sacct to see the running job")
        record = by_id(read_sacct([job]))[job]
        assert record.ended_at is None and record.wait_s >= 0
    finally:
        scancel(job)
