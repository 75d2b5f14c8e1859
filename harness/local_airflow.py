"""A real Airflow 3.3 on SQLite on this machine: api-server, dag-processor, scheduler.

The demo (``scripts/run_example_dag.py``), the tests and the benchmarks start Airflow with
it. Each component is a separate ``airflow`` process in its own session and process group,
logging to ``$AIRFLOW_HOME/<component>.log``; the scheduler can be killed and restarted on its
own (adoption tests). Runs are triggered and read through the REST API with a JWT from the
simple auth manager (user ``admin``, password :data:`PASSWORD`). For production, deploy
Airflow as its documentation says; this is for one machine.

Nothing is left behind: stopping a component stops every process it started (the
LocalExecutor's forked workers ignore SIGTERM, as they inherit the scheduler's handler, and
get SIGKILL), and :meth:`AirflowDeployment.stop_all` also stops what a scheduler killed on its
own left running. Use the deployment as a context manager, or call ``stop_all`` in a
``finally``, so that a failing test cleans up too. Each deployment serves task logs on a port
of its own (``[logging] worker_log_server_port``), not on Airflow's 8793 for all.
"""

from __future__ import annotations

import contextlib
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
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psutil

PASSWORD = "agora-test"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
AGORA_EXECUTOR = "agora:agora_optimizer.executor.agora_executor.AgoraExecutor"
EXECUTORS = f"LocalExecutor,{AGORA_EXECUTOR}"  # a deployment's [core] executor unless told
ORPHANS_GRACE_S = 5.0  # SIGTERM to SIGKILL for what a killed scheduler left running


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class AirflowDeployment:
    home: Path
    dags_folder: Path
    executor: str = EXECUTORS
    extra_env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    log_server_port: int = field(default_factory=free_port)  # the scheduler's serve-logs; not 8793 for all
    base_path: str = ""  # e.g. "/airflow": serve Airflow under that sub-path ([api] base_url)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _token: str = ""
    # What a scheduler killed on its own left running (its LocalExecutor workers, serve-logs, jobs):
    # the processes and the process group, stopped by stop_all.
    _orphans: list[psutil.Process] = field(default_factory=list)
    _orphan_groups: set[int] = field(default_factory=set)
    _sessions: set[int] = field(default_factory=set)  # one per component started, for leftover_processes
    _temporary_dir: str = ""  # see temporary_dir

    def __enter__(self) -> AirflowDeployment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_all()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_path.rstrip('/')}"

    @property
    def temporary_dir(self) -> str:
        """The deployment's ``TMPDIR``: what its processes and tasks put in the temporary folder
        (multiprocessing's ``pymp-*``, Airflow's ``airflowtmp*``, the example DAG's scratch) is removed with
        it by :meth:`stop_all` (or at exit), not left in /tmp. Short, in /tmp itself, not in the home: a
        fork server's socket in it must stay within AF_UNIX's 108 bytes, which a home deep in pytest's
        folders passes."""
        if not self._temporary_dir:
            self._temporary_dir = tempfile.mkdtemp(prefix="agora-af-")
            weakref.finalize(self, shutil.rmtree, self._temporary_dir, True)
        return self._temporary_dir

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
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_server_port),
                "TMPDIR": self.temporary_dir,
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
        """Start the components (api-server, dag-processor, scheduler by default; ``triggerer`` on request,
        for deferrable tasks); on a failure, stop those this call started."""
        started: list[str] = []
        try:
            for component in components or ("api-server", "dag-processor", "scheduler"):
                args = {
                    "api-server": ["api-server", "-H", "127.0.0.1", "-p", str(self.port)],
                    "dag-processor": ["dag-processor"],
                    "scheduler": ["scheduler"],
                    "triggerer": ["triggerer"],  # only when asked: deferred tasks need it
                }[component]
                self.launch(component, [AIRFLOW, *args])
                started.append(component)
            if "api-server" in self.processes and (not components or "api-server" in components):
                wait_healthy(self.api_url, self.processes["api-server"], 180, lambda: self.log("api-server"))
        except BaseException:
            for component in started:
                self.stop(component, timeout_s=10)
            raise

    def launch(self, component: str, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        """Start ``argv`` as a component of this deployment (a Celery worker, say, under ``taskset``): in a
        session of its own, logging to ``$AIRFLOW_HOME/<component>.log``, with :attr:`env` plus ``env``;
        stopped by :meth:`stop` and :meth:`stop_all` as the others are."""
        if component in self.processes:
            raise AssertionError(f"component {component} is already running")
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / f"{component}.log", "ab")  # noqa: SIM115 - the child owns it
        self.processes[component] = subprocess.Popen(
            argv, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self._sessions.add(self.processes[component].pid)

    def stop(self, component: str, sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
        """Stop a component and the processes it started: ``sig``, then SIGKILL after ``timeout_s``.

        Stopped now: its process group and every descendant in its session. A descendant that
        left the session (a job of the agora local backend, started in a session of its own so
        that it outlives the scheduler) runs on, as it would in production, until :meth:`stop_all`.
        """
        process = self.processes.pop(component, None)
        if process is None:
            return
        # Collected before any signal: a dead parent's children are no longer its children. Its
        # session too (the id is ours while the process is not reaped): what lost its parent earlier.
        members = _tree(process.pid)
        detached = [member for member in members if _sid(member) not in (process.pid, None)]
        self._orphans += detached
        inside = {member for member in members if member not in detached} | set(_session(process.pid))
        stop_processes(sorted(inside, key=lambda m: m.pid), {process.pid}, sig, timeout_s)
        process.wait(timeout_s)

    def kill_scheduler_only(self) -> None:
        """SIGKILL the scheduler process alone (not its process group): jobs it started keep running.

        What it leaves (its LocalExecutor workers, its serve-logs, jobs it started) is stopped by
        :meth:`stop_all`, as a crashed scheduler's processes are stopped with the machine.
        """
        process = self.processes.pop("scheduler")
        members = _tree(process.pid)
        process.kill()
        process.wait(30)
        self._orphans += [member for member in members if member.pid != process.pid]
        self._orphan_groups.add(process.pid)  # the group outlives its leader while one member lives

    def stop_all(self) -> None:
        """Stop every component and what a killed scheduler left behind; never leaves a process of ours."""
        for component in list(self.processes):
            self.stop(component)
        if self._orphans:
            members = {member for orphan in self._orphans for member in _tree_of(orphan)}
            # Short: a dead scheduler's idle workers ignore SIGTERM, and nobody waits for what they would finish.
            stop_processes(sorted(members, key=lambda m: m.pid), self._orphan_groups, signal.SIGTERM, ORPHANS_GRACE_S)
        self._orphans.clear()
        self._orphan_groups.clear()
        if self._temporary_dir:
            shutil.rmtree(self._temporary_dir, ignore_errors=True)
            self._temporary_dir = ""

    def leftover_processes(self) -> list[psutil.Process]:
        """Live processes of this deployment (none after :meth:`stop_all`): see :func:`processes_under`."""
        return processes_under(self.home, self._sessions)

    def log(self, component: str) -> str:
        path = self.home / f"{component}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- REST API ------------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not self._token:
            self._token = api_token(self.api_url, "admin", PASSWORD)
        return api_request(self.api_url, self._token, method, path, **kwargs)

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


def agora_deployment(
    root: Path,
    catalog: str | Path,
    trace_store_url: str | None = None,
    *,
    dags_folder: Path | None = None,
    executor: str = EXECUTORS,
    extra_env: Mapping[str, str] | None = None,
) -> AirflowDeployment:
    """An Airflow under ``root`` with the settings of agora that the tests' deployments share.

    Its home is ``root/home`` and its DAGs ``dags_folder`` (default ``root/dags``); agora reads
    ``catalog`` (a file, or several joined by commas), keeps its plans in ``root/plans`` and the
    executor's job directories in ``root/jobs``, and records to ``trace_store_url`` (default:
    SQLite in ``root/traces.db``). ``extra_env`` adds settings, or overrides these.
    """
    settings = {
        "AIRFLOW__AGORA__CATALOG": str(catalog),
        "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
        "AIRFLOW__AGORA__STATE_DIR": str(root / "jobs"),
        "AIRFLOW__AGORA__TRACE_STORE_URL": trace_store_url or f"sqlite:///{root / 'traces.db'}",
    }
    return AirflowDeployment(
        home=root / "home",
        dags_folder=dags_folder or root / "dags",
        executor=executor,
        extra_env={**settings, **(extra_env or {})},
    )


def wait_healthy(
    api_url: str, server: subprocess.Popen[bytes], deadline_s: float, log: Callable[[], str] | None = None
) -> None:
    """Wait for the api-server ``server`` at ``api_url`` to answer its health check; AssertionError when it
    exits first (with the end of ``log()``, its log) or is not healthy within ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = f":\n{log()[-3000:]}" if log is not None else ""
            raise AssertionError(f"airflow api-server exited with {server.returncode}{tail}")
        try:
            if httpx.get(f"{api_url}/api/v2/monitor/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"airflow api-server not healthy within {deadline_s} s")


def api_token(api_url: str, user: str, password: str, timeout_s: float = 30) -> str:
    """A JWT of Airflow's simple auth manager for ``user`` (``POST /auth/token``)."""
    answer = httpx.post(f"{api_url}/auth/token", json={"username": user, "password": password}, timeout=timeout_s)
    answer.raise_for_status()
    return str(answer.json()["access_token"])


def api_request(api_url: str, token: str, method: str, path: str, timeout_s: float = 30, **kwargs: Any) -> Any:
    """The JSON answer of Airflow's REST API v2 at ``path``; raises on an error status."""
    answer = httpx.request(
        method, f"{api_url}/api/v2{path}", headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, **kwargs
    )
    answer.raise_for_status()
    return answer.json()


def _tree_of(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return [process]


def _tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants, as they are now (empty when it is gone)."""
    try:
        return _tree_of(psutil.Process(pid))
    except psutil.Error:
        return []


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (a zombie is not: it holds no memory and no port)."""
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.Error:
            pass
    return alive


def _signal(processes: list[psutil.Process], groups: set[int], sig: int) -> None:
    alive = _alive(processes)
    for group in groups:
        # Only a group one of ours is still in: a group id whose members are all gone may be reused.
        if any(_pgid(process) == group for process in alive):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.send_signal(sig)


def _session(sid: int) -> list[psutil.Process]:
    """The live processes of session ``sid``."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError):
            if os.getsid(process.pid) == sid:
                members.append(process)
    return members


def _sid(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except ProcessLookupError:
        return None


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except ProcessLookupError:
        return None


def stop_processes(processes: list[psutil.Process], groups: set[int], sig: int, timeout_s: float) -> None:
    """Send ``sig`` to the processes and process groups, SIGKILL what still runs after ``timeout_s``.

    ``processes`` are collected before any signal (``psutil.Process`` objects: a pid reused by
    another process in the meantime is left alone); the groups catch what they forked since.
    Raises AssertionError naming what survived SIGKILL.
    """
    _signal(processes, groups, sig)
    if _wait_gone(processes, timeout_s):
        return
    _signal(processes, groups, signal.SIGKILL)
    if not _wait_gone(processes, 10):
        survivors = ", ".join(f"{p.pid} {' '.join(_cmdline(p))}" for p in _alive(processes))
        raise AssertionError(f"processes survived SIGKILL: {survivors}")


def _wait_gone(processes: list[psutil.Process], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def processes_under(root: Path, sessions: Collection[int] = ()) -> list[psutil.Process]:
    """Live processes (not zombies, not this one nor its ancestors) that belong to ``root``.

    One belongs when it is in one of ``sessions``, or when its environment, working directory,
    command line or open files name ``root`` or a path under it. (Not the environment alone:
    a process that set its title, as Airflow's workers and serve-logs do, no longer shows it.)
    """
    top = str(root).rstrip("/")
    skip = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        skip |= {parent.pid for parent in psutil.Process().parents()}
    found = []
    for process in psutil.process_iter():
        if process.pid in skip:
            continue
        try:
            with process.oneshot():
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                if os.getsid(process.pid) in sessions:
                    found.append(process)
                    continue
                texts = [*process.environ().values(), process.cwd(), *process.cmdline()]
                texts += [file.path for file in process.open_files()]
        except (psutil.Error, ProcessLookupError):  # gone meanwhile, or not ours to read
            continue
        if any(f"{top}/" in f"{text}/" for text in texts):
            found.append(process)
    return found


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
