"""One allocation a run really held: a planned machine's lease as the backend saw it (no Airflow here).

A backend that holds an allocation per planned machine (a SLURM allocation, an AWS Batch
compute environment's instance, a local pool's CPU slice) reports each one it has released
as a :class:`LeaseRecord`; the run record prices it with the catalog's billing rule. ``source``
says where its times come from (``slurm accounting``, ``batch job times``, ``task times``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class LeaseRecord:
    dag_id: str
    run_id: str
    machine: str  # the planned machine id, TYPE#N
    resource: str  # the catalog resource (type) it was sized as
    backend: str
    external_id: str  # the backend's id of the allocation ("" where there is none)
    started_at: datetime  # timezone-aware UTC: when the allocation began (billing starts)
    ended_at: datetime  # when it was released
    source: str

    @property
    def seconds(self) -> float:
        return max(0.0, (self.ended_at - self.started_at).total_seconds())
