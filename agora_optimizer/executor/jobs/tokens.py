"""A job's Execution API token, renewed while the job waits (in its backend's queue, or held for its machine).

Airflow signs each workload's token for ``[execution_api] jwt_expiration_time``; a job that waits longer
would start with a token the API server refuses. The lifecycle says when (``RenewToken``, every
``[agora] token_refresh_s``); :class:`TokenRenewal` writes the fresh token into the job's
``workload.json``, which the worker reads when it starts, and passes it on through the backend to a job
that cannot read the job directory (AWS Batch, through S3).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backend_set import BackendSet
from agora_optimizer.executor.lifecycle import Job, TokenRenewed
from agora_optimizer.executor.state_files import write_private


class TokenRenewal:
    """Renews the tokens of waiting jobs; ``signer`` gives Airflow's JWT generator (the executor's), ``backends``
    pass a renewed workload on, ``log`` is the executor's logger."""

    def __init__(self, backends: BackendSet, signer: Callable[[], Any], log: Any) -> None:
        self._backends = backends
        self._signer = signer
        self._log = log

    def renew(self, job: Job) -> TokenRenewed | None:
        """Give ``job`` a fresh token in its workload file and pass it on; the event that tells its lifecycle
        (``published``: the job can read it too), None for an adopted job (its token is not the executor's)."""
        if job.workload is None:
            return None
        token = job.workload.generate_token(str(job.workload.ti.id), self._signer())
        workload = job.workload.model_copy(update={"token": token})
        write_private(job.spec.workload_path, workload.model_dump_json())
        try:  # a backend whose jobs cannot read the job dir (AWS) passes it on
            self._backends.get(job.record.backend).publish_workload(job.spec)
        except AgoraError as exc:
            self._log.warning(
                "Cannot pass %s its renewed token (%s); trying again at the next poll", job.record.label, exc
            )
            return TokenRenewed(workload, published=False)
        return TokenRenewed(workload, published=True)

    def fresh(self, workload: Any) -> Any:
        """The workload with a new token (a try re-run after a long run, whose token may be near its end)."""
        with contextlib.suppress(Exception):  # no signer: the queued job's renewal gives it one later
            token = workload.generate_token(str(workload.ti.id), self._signer())
            return workload.model_copy(update={"token": token})
        return workload
