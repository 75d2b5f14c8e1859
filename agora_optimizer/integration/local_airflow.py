"""A real Airflow 3.3 on SQLite on this machine: api-server, dag-processor, scheduler.

The demo (``scripts/run_example_dag.py``), the tests and the benchmarks start Airflow with
it. Each component is a separate ``airflow`` process in its own process group, logging to
``$AIRFLOW_HOME/<component>.log``; the scheduler can be killed and restarted on its own
(adoption tests). Runs are triggered and read through the REST API with a JWT from the
simple auth manager (user ``admin``, password :data:`PASSWORD`). For production, deploy
Airflow as its documentation says; this is for one machine.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

PASSWORD = "agora-test"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
AGORA_EXECUTOR = "agora:agora_optimizer.executor.agora_executor.AgoraExecutor"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class AirflowDeployment:
    home: Path
    dags_folder: Path
    executor: str = f"LocalExecutor,{AGORA_EXECUTOR}"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    base_path: str = ""  # e.g. "/airflow": serve Airflow under that sub-path ([api] base_url)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _token: str = ""

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_path.rstrip('/')}"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__EXECUTOR": self.executor,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            }
        )
        if self.base_path:
            env["AIRFLOW__API__BASE_URL"] = f"{self.api_url}/"
        env.update(self.extra_env)
        return env

    def migrate(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
        migrate_database(self.env)

    def start(self, *components: str) -> None:
        for component in components or ("api-server", "dag-processor", "scheduler"):
            args = {
                "api-server": ["api-server", "-H", "127.0.0.1", "-p", str(self.port)],
                "dag-processor": ["dag-processor"],
                "scheduler": ["scheduler"],
            }[component]
            log = open(self.home / f"{component}.log", "ab")  # noqa: SIM115 - the child owns it
            self.processes[component] = subprocess.Popen(
                [AIRFLOW, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            log.close()
        if "api-server" in self.processes and (not components or "api-server" in components):
            self._wait_healthy(180)

    def stop(self, component: str, sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
        process = self.processes.pop(component, None)
        if process is None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout_s)

    def kill_scheduler_only(self) -> None:
        """SIGKILL the scheduler process alone (not its process group): jobs it started keep running."""
        process = self.processes.pop("scheduler")
        process.kill()
        process.wait(30)

    def stop_all(self) -> None:
        for component in list(self.processes):
            self.stop(component)

    def log(self, component: str) -> str:
        path = self.home / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- REST API ------------------------------------------------------------------------------

    def _wait_healthy(self, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        server = self.processes["api-server"]
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise AssertionError(
                    f"airflow api-server exited with {server.returncode}:\n{self.log('api-server')[-3000:]}"
                )
            try:
                if httpx.get(f"{self.api_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"airflow api-server not healthy within {deadline_s} s")

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not self._token:
            answer = httpx.post(
                f"{self.api_url}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=10
            )
            answer.raise_for_status()
            self._token = answer.json()["access_token"]
        answer = httpx.request(
            method,
            f"{self.api_url}/api/v2{path}",
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=30,
            **kwargs,
        )
        answer.raise_for_status()
        return answer.json()

    def wait_for_dag(self, dag_id: str, timeout_s: float = 180) -> None:
        def parsed() -> bool:
            try:
                self.request("GET", f"/dags/{dag_id}")
                return True
            except httpx.HTTPStatusError:
                return False

        wait_until(parsed, timeout_s, f"the dag-processor to parse {dag_id}", self)

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        body = {"logical_date": None, "conf": dict(conf or {})}
        return str(self.request("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float = 300) -> str:
        wait_until(lambda: self.run_state(dag_id, run_id) in ("success", "failed"), timeout_s, f"run {run_id}", self)
        return self.run_state(dag_id, run_id)

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        answer = self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
        return {ti["task_id"]: ti for ti in answer["task_instances"]}

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        answer = self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return list(answer["task_instances"])


def migrate_database(env: Mapping[str, str]) -> None:
    """``airflow db migrate`` for the SQLite database under ``env``'s ``AIRFLOW_HOME``.

    A new database is a copy of one migrated once per Airflow version and cached (under
    ``$AGORA_AIRFLOW_DB_CACHE``, else the temporary folder), and ``airflow.cfg`` is written as
    any airflow command writes it: 4 s instead of 10 to 30 s. An existing database, or another
    database URL, is migrated as usual.
    """
    target = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in env or target.exists():
        _run_migrate(env)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated_template(env), target)
    # What every airflow command does first, as migrating did: write airflow.cfg with this home's
    # secrets. Without it each component writes its own, and their JWTs do not match.
    write_config = "from airflow.configuration import write_default_airflow_configuration_if_needed as w; w()"
    result = subprocess.run([sys.executable, "-c", write_config], capture_output=True, text=True, env=dict(env))
    if result.returncode != 0:
        raise AssertionError(f"writing airflow.cfg failed:\n{result.stderr[-3000:]}")


def _run_migrate(env: Mapping[str, str]) -> None:
    result = subprocess.run([AIRFLOW, "db", "migrate"], capture_output=True, text=True, env=dict(env), timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"airflow db migrate failed:\n{result.stderr[-3000:]}")


def _migrated_template(env: Mapping[str, str]) -> Path:
    default = Path(tempfile.gettempdir()) / f"agora-airflow-db-{os.getuid()}"
    cache = Path(os.environ.get("AGORA_AIRFLOW_DB_CACHE", default))
    cache.mkdir(parents=True, exist_ok=True)
    template = cache / f"airflow-{version('apache-airflow')}.db"
    with open(cache / "lock", "w") as lock:  # one migration at a time (parallel test workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            with tempfile.TemporaryDirectory(dir=cache) as scratch:
                _run_migrate({**env, "AIRFLOW_HOME": scratch})
                os.replace(Path(scratch) / "airflow.db", template)
    return template


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, deployment: AirflowDeployment | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(1.0)
    logs = ""
    if deployment is not None:
        logs = "\n".join(f"--- {c}.log\n{deployment.log(c)[-4000:]}" for c in ("scheduler", "dag-processor"))
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{logs}")
