"""docker/compose.yaml built and run for real: the stack end to end (issue 19).

On a Debian machine without an engine or a registry, ``scripts/docker_engine.sh start`` installs
Debian's engine, starts a daemon of its own and makes the base images (docker/standins/, see
docs/deployment.md); ``scripts/docker_engine.sh build`` builds docker/Dockerfile unchanged. The
stack is brought up with the project's compose file: PostgreSQL, the munge key, ``airflow-init``,
the api-server, scheduler (AgoraExecutor, a SLURM client), dag-processor and triggerer, the SLURM
controller and both compute nodes, and Redis (the scheduler waits for it); not the two Celery
workers, whose pools the plans here leave out. Then:

- the example DAG and the WfInstances replay ``bacass-dirt02-001`` (11 tasks) are planned inside the
  scheduler's container with ``agora optimize airflow:... --apply`` on the deployment's SLURM
  resources, and run; every task runs under the AgoraExecutor in the compute container of the
  partition its plan chose: the task's own report (host, SLURM job and partition), the
  controller's record of that job (``sacct -c`` in the controller: this slurm.conf has no slurmdbd, so
  sacct reads the job completion log) and the trace row in the PostgreSQL trace store all agree with the plan;
- the agora view answers with Airflow's login and refuses without it;
- ``docker-compose restart airflow-scheduler`` in the middle of a run loses no task and runs none twice;
- no secret comes from the repository (issue 32): a token signed with the JWT secret compose.yaml
  used to default to is refused while one signed with the key generated into the airflow-secrets
  volume is accepted; the api-server is published on the host's loopback only; a connection's
  password is stored encrypted with the volume's Fernet key; the keys and the admin's passwords file
  are user airflow's alone, and the compute nodes, where tasks run, do not see the keys;
- nor does a password: from a compute node, PostgreSQL refuses the passwords compose.yaml used to
  give its superuser and roles and Redis asks for one, while the scheduler reaches both with the
  generated ones; each secret file is its readers' alone, and a node sees the trace store's URL
  only, which its tasks write their trace rows with; a volume with the old passwords gets a one-line
  fix from airflow-init, and the documented step makes it start again.

Everything is torn down at the end (``down -v``; the daemon is stopped if this module started it),
also after a failure. The times of each step go to ``out/docker-stack-timings.json``. It takes
minutes (the image build most): marked ``docker`` and ``slow``, and it runs in the SLURM tests'
xdist group (tests/conftest.py), so that it does not load the machine while they run.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import socket
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import psutil
import pytest
import yaml
from cryptography.fernet import Fernet
from sqlalchemy.engine import make_url

from harness.local_airflow import api_request, api_token, free_port
from tests.conftest import REPO
from tests.deploy.test_docker import CATALOG, COMPOSE_FILE, IN_CI, ComposeMissingError, compose_argv

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ENGINE = REPO / "scripts" / "docker_engine.sh"
PROJECT = "agora-e2e"
# What `up` starts by name (with their dependencies: postgres, redis, munge-key, airflow-init, the
# SLURM controller and nodes); the Celery workers are left out.
SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
PASSWORD = "agora-e2e"
WFINSTANCE = "bacass-dirt02-001"
WF_DAG = f"agora_wfinstance_{WFINSTANCE}"
ETL_DAG = "agora_example_etl"
SHARED = "/opt/airflow/agora/e2e"  # on the agora-data volume: the scheduler and both nodes see it
NODE_OF_PARTITION = {"small": "slurm-small", "large": "slurm-large"}
TIMINGS = REPO / "out" / "docker-stack-timings.json"
SECRETS_DIR = "/run/airflow-secrets"  # the airflow-secrets volume, where airflow-init makes Airflow's keys
KEY_FILES = ("jwt_secret", "api_secret_key", "fernet_key")
PASSWORDS_FILE = "/opt/airflow/simple_auth_manager_passwords.json.generated"
PUBLIC_JWT_SECRET = "agora-compose-jwt-secret-change-me"  # compose.yaml's default before issue 32
# The secrets volumes where they are mounted, each file with the owner that reads it.
SECRET_FILES = {
    "airflow-apiserver": {
        SECRETS_DIR: ("airflow", [*KEY_FILES, "sql_alchemy_conn", "celery_broker_url", "celery_result_backend"]),
        "/run/agora-secrets": ("airflow", ["trace_store_url"]),
    },
    "postgres": {"/run/postgres-secrets": ("root", ["postgres_password", "airflow_db_password", "agora_db_password"])},
    "redis": {"/run/redis-secrets": ("root", ["redis_password", "redis.conf"])},
}
# What PostgreSQL's roles were given by compose.yaml's defaults before issue 32: role, password, database.
FORMER_PASSWORDS = (
    ("postgres", "agora", "postgres"),
    ("airflow", "airflow", "airflow"),
    ("agora", "agora", "agora_traces"),
)
# Tried from a compute node, as user airflow, as a task there would: each login to PostgreSQL with the
# role and password given on stdin (JSON), and a PING to Redis without a password. Prints JSON.
PROBE = """
import json, socket, sys
import psycopg

found = {}
for role, password, database in json.load(sys.stdin):
    try:
        psycopg.connect(host="postgres", user=role, password=password, dbname=database, connect_timeout=10).close()
        found[role + "@" + database] = "accepted"
    except psycopg.OperationalError as exc:
        found[role + "@" + database] = " ".join(str(exc).split())
with socket.create_connection(("redis", 6379), timeout=10) as redis:
    redis.sendall(b"PING\\r\\n")
    found["redis"] = redis.makefile("rb").readline().decode().strip()
print(json.dumps(found))
"""
# The scheduler's Celery app (the CeleryExecutor's) reaches the broker with the URL Airflow reads.
CELERY_PING = (
    "from airflow.providers.celery.executors.celery_executor import app\n"
    "with app.connection_for_write() as connection:\n"
    "    connection.ensure_connection(max_retries=3)\n"
    "    print(connection.as_uri())\n"
)


def _run(argv: list[str], env: dict[str, str], timeout_s: float, what: str) -> str:
    """stdout of ``argv``; on failure an AssertionError with the end of its output."""
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{what}: no answer in {timeout_s} s ({shlex.join(argv)})") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:])
        raise AssertionError(f"{what} exited {done.returncode} ({shlex.join(argv)}):\n{tail}")
    return done.stdout


@dataclass
class Stack:
    """The running stack: Compose and the engine's environment, the api-server's URL, the timings."""

    compose: tuple[str, ...]
    env: dict[str, str]
    api_url: str
    timings_s: dict[str, float] = field(default_factory=dict)
    _token: str = ""

    def dc(self, *args: str, timeout_s: float = 300) -> str:
        argv = [*self.compose, "-p", PROJECT, "-f", str(COMPOSE_FILE), *args]
        return _run(argv, self.env, timeout_s, f"compose {args[0]}")

    def exec(self, service: str, *argv: str, user: str = "", stdin: str | None = None, timeout_s: float = 300) -> str:
        command = [*self.compose, "-p", PROJECT, "-f", str(COMPOSE_FILE), "exec", "-T"]
        command += ["-u", user] if user else []
        command += [service, *argv]
        done = subprocess.run(
            command, env=self.env, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        assert done.returncode == 0, f"{service}: {shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}"
        return done.stdout

    def run_once(self, service: str) -> subprocess.CompletedProcess[str]:
        """``run --rm --no-deps`` of a one-shot service, whatever its exit code."""
        argv = [*self.compose, "-p", PROJECT, "-f", str(COMPOSE_FILE), "run", "--rm", "--no-deps", service]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=600, check=False)

    def probe(self, service: str, logins: list[tuple[str, str, str]]) -> dict[str, str]:
        """:data:`PROBE` in ``service`` as user airflow: each login's outcome, and Redis's answer."""
        argv = ("python", "-c", PROBE)
        return dict(json.loads(self.exec(service, *argv, user="airflow", stdin=json.dumps(logins))))

    def logs(self, *services: str) -> str:
        try:
            return self.dc("logs", "--no-color", "--tail", "60", *services, timeout_s=60)
        except AssertionError as exc:
            return str(exc)

    def token(self) -> str:
        if not self._token:
            self._token = api_token(self.api_url, "admin", PASSWORD)
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        return api_request(self.api_url, self.token(), method, path, timeout_s=60, **kwargs)

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str, *services: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2.0)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{self.logs(*services)}")

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        answer = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
        return {ti["task_id"]: ti for ti in answer["task_instances"]}

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        body = {"logical_date": None, "conf": conf or {}}
        return str(self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"])

    def finish(self, dag_id: str, run_id: str, timeout_s: float = 600) -> str:
        self.wait(
            lambda: self.run_state(dag_id, run_id) in ("success", "failed"),
            timeout_s,
            f"run {run_id} of {dag_id}",
            "airflow-scheduler",
            "slurmctld",
        )
        return self.run_state(dag_id, run_id)

    def succeeds(self, dag_id: str, run_id: str) -> None:
        """The run ends in success; else an AssertionError with each unsuccessful task's state and log."""
        state = self.finish(dag_id, run_id)
        if state == "success":
            return
        lines = [f"run {run_id} of {dag_id} ended {state}"]
        for task_id, ti in self.task_instances(dag_id, run_id).items():
            if ti["state"] == "success":
                continue
            lines.append(f"- {task_id}: {ti['state']} (try {ti['try_number']}, host {ti['hostname']!r})")
            if ti["try_number"]:
                try:
                    log = self.api(
                        "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{ti['try_number']}"
                    )
                    lines += [f"    {entry.get('event', '')}" for entry in log.get("content", [])[-12:]]
                except httpx.HTTPError as exc:
                    lines.append(f"    (no log: {exc})")
        raise AssertionError("\n".join(lines) + "\n" + self.logs("airflow-scheduler"))

    def plan(self, dag_id: str, catalog: dict[str, Any], *options: str) -> dict[str, str]:
        """Plan ``dag_id`` in the scheduler's container on ``catalog``, put the plan in force, and wait
        until the dag-processor has applied it (each task's queue is its resource): task -> resource."""
        path = f"{SHARED}/{dag_id}.catalog.yaml"
        self.exec("airflow-scheduler", "sh", "-c", f"mkdir -p {SHARED} && cat >{path}", user="airflow",
                  stdin=yaml.safe_dump(catalog))  # fmt: skip
        out = f"{SHARED}/{dag_id}.plan.json"
        self.exec("airflow-scheduler", "agora", "optimize", f"airflow:{dag_id}", "--catalog", path, "-o", out,
                  "--time-limit-s", "30", "--apply", *options, user="airflow", timeout_s=600)  # fmt: skip
        plan = json.loads(self.exec("airflow-scheduler", "cat", out))
        planned = {a["task"]: a["resource"] for a in plan["assignments"]}

        def applied() -> bool:
            tasks = self.api("GET", f"/dags/{dag_id}/tasks")["tasks"]
            return {t["task_id"]: t["queue"] for t in tasks} == planned

        self.wait(applied, 300, f"the dag-processor to apply the plan of {dag_id}", "airflow-dag-processor")
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        return planned

    def jobs(self) -> dict[str, dict[str, str]]:
        """Every finished job as ``sacct`` in the controller reports it, by job id. This slurm.conf has no
        slurmdbd: ``sacct -c`` reads the controller's job completion log (jobcomp/filetxt) instead."""
        fields = ["JobID", "JobName%200", "Partition", "NodeList", "State"]
        text = self.exec("slurmctld", "sacct", "-c", "-n", "-P", "-o", ",".join(fields))
        keys = [name.split("%")[0] for name in fields]
        rows = [dict(zip(keys, line.split("|"), strict=True)) for line in text.splitlines() if line.strip()]
        return {row["JobID"]: row for row in rows}

    def traces(self, dag_id: str, run_id: str) -> dict[str, dict[str, str]]:
        """agora's trace rows of the run, read from the trace store's PostgreSQL database."""
        query = (
            "SELECT task_id, resource_type, backend, host, state, try_number, operator FROM agora_task_attempts "
            f"WHERE dag_id = '{dag_id}' AND run_id = '{run_id}'"
        )
        text = self.exec("postgres", "psql", "-U", "agora", "-d", "agora_traces", "-A", "-t", "-F", "|", "-c", query)
        keys = ("task_id", "resource_type", "backend", "host", "state", "try_number", "operator")
        return {row[0]: dict(zip(keys, row, strict=True)) for row in (line.split("|") for line in text.splitlines())}


def _engine(action: str, env: dict[str, str], timeout_s: float) -> str:
    return _run(["bash", str(ENGINE), action], env, timeout_s, f"docker_engine.sh {action}")


def _slurm_catalog(**changes: dict[str, Any]) -> dict[str, Any]:
    """docker/catalog.yaml's SLURM resources (the plans here leave the Celery pools out), with ``changes``."""
    catalog = yaml.safe_load(CATALOG.read_text())
    catalog["resources"] = [r | changes.get(r["name"], {}) for r in catalog["resources"] if r["backend"] == "slurm"]
    return catalog


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    try:
        compose = compose_argv()
    except ComposeMissingError as exc:
        if IN_CI:
            pytest.fail(f"a Compose client must be installable in CI: {exc}")
        pytest.skip(f"no Compose client here: {exc}")
    if os.geteuid() != 0 and not IN_CI:
        pytest.skip("scripts/docker_engine.sh starts dockerd: root only")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
    base_env["AGORA_DOCKER_DIR"] = engine_dir = os.environ.get("AGORA_DOCKER_DIR", "/var/tmp/agora-docker")
    ours = subprocess.run(["bash", str(ENGINE), "status"], env=base_env, capture_output=True, check=False).returncode
    started_engine = ours != 0  # stop the daemon at the end only if this module started it
    fresh = not Path(engine_dir).exists()  # and delete its data (images, volumes) only if it made them
    timings: dict[str, float] = {}
    env = dict(base_env)
    stack = None
    try:
        began = time.monotonic()
        for line in _engine("start", base_env, 1800).splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = value
        timings["engine_and_base_images_s"] = time.monotonic() - began
        step = time.monotonic()
        _engine("build", env, 2400)
        timings["image_build_s"] = time.monotonic() - step
        env |= {
            "AIRFLOW_PORT": str(free_port()),
            "AIRFLOW_ADMIN_PASSWORD": PASSWORD,
            "AGORA_WFINSTANCE": WFINSTANCE,
            # No re-planning of late runs: a repair may move a task that the AgoraExecutor holds onto a
            # Celery pool of the deployment's catalog, which it cannot run (the task then fails).
            "AGORA_REPLAN_SLACK": "0",
        }
        stack = Stack(compose, env, f"http://127.0.0.1:{env['AIRFLOW_PORT']}", timings)
        step = time.monotonic()
        stack.dc("up", "-d", "--no-build", *SERVICES, timeout_s=1200)
        for name in SERVICES:
            stack.wait(functools.partial(_healthy, stack, name), 600, f"{name} healthy", name)
        timings["stack_up_s"] = time.monotonic() - step
        timings["cold_start_s"] = time.monotonic() - began
        yield stack
    finally:
        step = time.monotonic()
        try:
            if stack is not None:
                stack.dc("down", "-v", "--remove-orphans", "-t", "20", timeout_s=600)
        finally:
            if started_engine:
                subprocess.run(["bash", str(ENGINE), "stop", *(["--purge"] if fresh else [])], env=base_env,
                               capture_output=True, timeout=300, check=False)  # fmt: skip
            timings["teardown_s"] = time.monotonic() - step
            TIMINGS.parent.mkdir(exist_ok=True)
            TIMINGS.write_text(json.dumps({k: round(v, 1) for k, v in timings.items()}, indent=1) + "\n")


def _healthy(stack: Stack, service: str) -> bool:
    """Whether the service's container runs and its healthcheck passes."""
    ids = stack.dc("ps", "-q", service, timeout_s=60).split()
    inspect = ["docker", "inspect", "-f", "{{.State.Health.Status}}", *ids[:1]]
    return bool(ids) and _run(inspect, stack.env, 60, "docker inspect").strip() == "healthy"


def test_the_stack_comes_up_with_both_slurm_nodes_idle(stack: Stack) -> None:
    nodes = stack.exec("airflow-scheduler", "sinfo", "-h", "-N", "-o", "%N %P %c %m %t").split("\n")
    seen = {line.split()[0]: line.split()[1:] for line in nodes if line.strip()}
    assert seen["slurm-small"][:3] == ["small*", "4", "8192"]
    assert seen["slurm-large"][:3] == ["large", "8", "16384"]
    assert all(state[3] in ("idle", "mix", "alloc") for state in seen.values()), seen
    version = stack.api("GET", "/version")
    assert version["version"].startswith("3."), version


def _check_run_on_planned_nodes(stack: Stack, dag_id: str, run_id: str, planned: dict[str, str]) -> None:
    """Every task succeeded under the AgoraExecutor on its planned resource, in the compute container of
    that resource's partition, as the controller and the trace store recorded it."""
    resources = {r["name"]: r for r in _slurm_catalog()["resources"]}
    instances = stack.task_instances(dag_id, run_id)
    assert set(instances) == set(planned)
    for task_id, ti in instances.items():
        assert (ti["state"], ti["executor"], ti["queue"]) == ("success", "agora", planned[task_id]), ti
        node = NODE_OF_PARTITION[resources[planned[task_id]]["partition"]]
        assert ti["hostname"].split(".")[0] == node, (task_id, ti["hostname"])

    def traced() -> bool:
        rows = stack.traces(dag_id, run_id)
        return set(rows) == set(planned) and all(row["backend"] for row in rows.values())

    stack.wait(traced, 120, f"the trace rows of {run_id}", "airflow-scheduler")
    for task_id, row in stack.traces(dag_id, run_id).items():
        node = NODE_OF_PARTITION[resources[planned[task_id]]["partition"]]
        assert (row["resource_type"], row["backend"], row["state"]) == (planned[task_id], "slurm", "success"), row
        assert row["host"] == node, row
        # The operator is the listener's, in the task process on the node, which reads the trace store's
        # URL from the agora-secrets volume there (the executor's row has none of its own).
        assert row["operator"], f"no trace row from the task on {node}: {row}"
    # The controller's own record: the DAG's jobs (one lease per planned machine, recorded when it ends,
    # soon after its last task) ran on the node of their partition.
    partitions = {resources[r]["partition"] for r in planned.values()}

    def leases() -> list[dict[str, str]]:
        return [j for j in stack.jobs().values() if j["JobName"].startswith(f"agora-lease-{dag_id}.")]

    stack.wait(lambda: {j["Partition"] for j in leases()} >= partitions, 300, f"the leases of {dag_id} to end")
    for job in leases():
        assert job["NodeList"] == NODE_OF_PARTITION[job["Partition"]], job


def test_the_example_dag_runs_each_task_in_the_container_its_plan_chose(stack: Stack) -> None:
    # slurm-small planned with one core: the time objective then spreads the parallel tasks over both nodes.
    planned = stack.plan(ETL_DAG, _slurm_catalog(**{"slurm-small": {"vcpus": 1}}), "--objective", "time")
    assert set(planned.values()) == {"slurm-small", "slurm-large"}, planned
    reports = f"{SHARED}/reports-{uuid.uuid4().hex[:8]}"
    # The tasks share their scratch files across nodes through the shared volume.
    run_id = stack.trigger(ETL_DAG, {"report_dir": reports, "scratch_dir": f"{reports}/scratch"})
    stack.succeeds(ETL_DAG, run_id)
    _check_run_on_planned_nodes(stack, ETL_DAG, run_id, planned)
    seen_by = {task: json.loads(stack.exec("airflow-scheduler", "cat", f"{reports}/{task}.json")) for task in planned}
    stack.wait(lambda: {s["slurm_job_id"] for s in seen_by.values()} <= set(stack.jobs()), 300, "the jobs to end")
    jobs = stack.jobs()
    resources = {r["name"]: r for r in _slurm_catalog()["resources"]}
    for task_id, resource in planned.items():  # what the task itself saw, and the controller's record of its job
        seen = seen_by[task_id]
        partition = resources[resource]["partition"]
        assert (seen["host"], seen["slurm_partition"]) == (NODE_OF_PARTITION[partition], partition), seen
        job = jobs[seen["slurm_job_id"]]
        assert (job["Partition"], job["NodeList"], job["State"]) == (partition, seen["host"], "COMPLETED"), job


def test_a_wfinstances_replay_runs_on_its_planned_nodes_and_its_traces_land_in_postgres(stack: Stack) -> None:
    planned = stack.plan(WF_DAG, _slurm_catalog())
    assert len(planned) == 11
    run_id = stack.trigger(WF_DAG)
    stack.succeeds(WF_DAG, run_id)
    _check_run_on_planned_nodes(stack, WF_DAG, run_id, planned)


def test_the_agora_view_answers_behind_airflows_login(stack: Stack) -> None:
    refused = httpx.get(f"{stack.api_url}/agora/api/dags", timeout=30)
    assert refused.status_code == 401, refused.text
    answer = httpx.get(
        f"{stack.api_url}/agora/api/dags", headers={"Authorization": f"Bearer {stack.token()}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert ETL_DAG in json.dumps(answer.json())  # its plan, put in force above
    page = httpx.get(f"{stack.api_url}/agora/", headers={"Authorization": f"Bearer {stack.token()}"}, timeout=30)
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_restarting_the_scheduler_mid_run_loses_no_task(stack: Stack) -> None:
    planned = stack.plan(WF_DAG, _slurm_catalog())
    run_id = stack.trigger(WF_DAG)

    def some_done_some_not() -> bool:
        states = [ti["state"] for ti in stack.task_instances(WF_DAG, run_id).values()]
        return "success" in states and any(s != "success" for s in states)

    stack.wait(some_done_some_not, 300, f"{run_id} half-way", "airflow-scheduler")
    stack.dc("restart", "airflow-scheduler", timeout_s=300)
    stack.succeeds(WF_DAG, run_id)
    for task_id in stack.task_instances(WF_DAG, run_id):
        tries = stack.api("GET", f"/dags/{WF_DAG}/dagRuns/{run_id}/taskInstances/{task_id}/tries")["task_instances"]
        started = [t["try_number"] for t in tries if t.get("start_date")]
        # A task Airflow had queued that was still held for its machine's turn when the scheduler stopped
        # never ran: the new scheduler cannot adopt a job that was never submitted, and resets it (try 2),
        # as it resets any executor's queued task it cannot adopt. No task may run twice.
        assert len(started) == 1, f"{task_id}: tries {[(t['try_number'], t['state']) for t in tries]} started {started}"
    _check_run_on_planned_nodes(stack, WF_DAG, run_id, planned)


def _admin_token(secret: str) -> str:
    """A token of the simple auth manager's admin (its claims, and those of Airflow's JWTGenerator), signed
    with ``secret`` as Airflow signs with a shared key (HS512)."""
    now = int(time.time())
    claims = {"sub": "admin", "role": "ADMIN", "aud": "apache-airflow", "iat": now, "nbf": now, "exp": now + 300}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)  # the public default is short
        return jwt.encode(claims | {"jti": uuid.uuid4().hex}, secret, algorithm="HS512")


def test_a_token_signed_with_the_former_public_secret_is_refused(stack: Stack) -> None:
    def dags(token: str) -> httpx.Response:
        return httpx.get(f"{stack.api_url}/api/v2/dags", headers={"Authorization": f"Bearer {token}"}, timeout=30)

    refused = dags(_admin_token(PUBLIC_JWT_SECRET))
    assert refused.status_code in (401, 403), f"an admin token signed with the repository's key: {refused.text[:300]}"
    secret = stack.exec("airflow-apiserver", "cat", f"{SECRETS_DIR}/jwt_secret")
    assert len(secret) >= 64, "a generated key of 64 bytes or more"
    accepted = dags(_admin_token(secret))  # the same token signed with the volume's key: its form is Airflow's
    assert accepted.status_code == 200, accepted.text


def test_the_api_server_is_published_on_the_hosts_loopback_only(stack: Stack) -> None:
    container = stack.dc("ps", "-q", "airflow-apiserver", timeout_s=60).split()[0]
    inspect = ["docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", container]
    ports = json.loads(_run(inspect, stack.env, 60, "docker inspect"))
    bindings = [binding for spec in ports.values() for binding in spec or []]
    assert bindings and {binding["HostIp"] for binding in bindings} == {"127.0.0.1"}, ports
    port = int(stack.api_url.rsplit(":", 1)[1])
    outward = [
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family == socket.AF_INET and not address.address.startswith("127.")
    ]
    assert outward, "this host has no address but loopback's"
    for address in outward:  # this host's other addresses (its network's, the compose bridge's) refuse
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=5):
            pass


def test_connections_are_stored_encrypted_with_the_volumes_fernet_key(stack: Stack) -> None:
    conn_id, password = f"agora_e2e_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    stack.api("POST", "/connections", json={"connection_id": conn_id, "conn_type": "http", "password": password})
    query = f"SELECT is_encrypted, password FROM connection WHERE conn_id = '{conn_id}'"
    row = stack.exec("postgres", "psql", "-U", "airflow", "-d", "airflow", "-A", "-t", "-F", "|", "-c", query).strip()
    encrypted, stored = row.split("|", 1)
    assert encrypted == "t" and password not in stored, row
    key = stack.exec("airflow-apiserver", "cat", f"{SECRETS_DIR}/fernet_key")
    assert Fernet(key.encode()).decrypt(stored.encode()).decode() == password
    # The scheduler's container holds the same key: Airflow's CLI there (no entrypoint) reads it back.
    answer = stack.exec("airflow-scheduler", "airflow", "connections", "get", conn_id, "-o", "json", user="airflow")
    assert json.loads(answer)[0]["password"] == password


def test_every_secret_is_its_readers_alone_and_a_compute_node_sees_the_trace_stores_only(stack: Stack) -> None:
    seen = stack.exec("airflow-apiserver", "stat", "-c", "%a %U %n", PASSWORDS_FILE).splitlines()
    assert seen == [f"600 airflow {PASSWORDS_FILE}"], seen
    for service, folders in SECRET_FILES.items():
        for folder, (owner, names) in folders.items():
            listed = stack.exec(service, "ls", "-A", folder).split()
            assert sorted(listed) == sorted(names), (service, folder, listed)
            paths = [folder, *(f"{folder}/{name}" for name in names)]
            seen = stack.exec(service, "stat", "-c", "%a %U %n", *paths).splitlines()
            assert seen == [f"{700 if path == folder else 600} {owner} {path}" for path in paths], seen
    for node in NODE_OF_PARTITION.values():  # tasks run there, as user airflow
        for folder in (SECRETS_DIR, "/run/postgres-secrets", "/run/redis-secrets"):
            stack.exec(node, "test", "!", "-e", folder)
        assert stack.exec(node, "ls", "-A", "/run/agora-secrets", user="airflow").split() == ["trace_store_url"]


def test_a_compute_node_is_refused_the_former_default_passwords(stack: Stack) -> None:
    found = stack.probe("slurm-small", list(FORMER_PASSWORDS))
    for role, _, database in FORMER_PASSWORDS:
        assert "password authentication failed" in found[f"{role}@{database}"], found
    assert found["redis"] == "-NOAUTH Authentication required.", found
    # The trace store's URL, which a task there reads, opens its own database only.
    traces = make_url(stack.exec("slurm-small", "cat", "/run/agora-secrets/trace_store_url", user="airflow"))
    found = stack.probe("slurm-small", [(str(traces.username), str(traces.password), "agora_traces")])
    assert found[f"{traces.username}@agora_traces"] == "accepted", found
    found = stack.probe("slurm-small", [(str(traces.username), str(traces.password), "airflow")])
    assert "permission denied for database" in found[f"{traces.username}@airflow"], found
    # The scheduler reaches both with the generated passwords: PostgreSQL in every DAG test, and Redis
    # through the CeleryExecutor's own app.
    uri = stack.exec("airflow-scheduler", "python", "-c", CELERY_PING, user="airflow").strip().splitlines()[-1]
    assert uri.startswith("redis://:**@redis:6379/0"), uri


def test_a_volume_with_the_former_passwords_gets_its_fix_in_one_line(stack: Stack) -> None:
    """As a postgres-data volume made before issue 32: its superuser and role agora keep compose.yaml's old
    passwords (role airflow is left alone: the running stack needs it)."""
    password = stack.exec("postgres", "cat", "/run/postgres-secrets/postgres_password")
    old = "ALTER ROLE postgres PASSWORD 'agora'; ALTER ROLE agora PASSWORD 'agora';"
    stack.exec("postgres", "psql", "-U", "postgres", "-d", "postgres", "-c", old)
    fix = "/docker-entrypoint-initdb.d/10-agora-databases.sh"
    try:
        refused = stack.run_once("airflow-init")
        assert refused.returncode != 0, refused.stdout[-2000:]
        said = [line for line in (refused.stdout + refused.stderr).splitlines() if "entrypoint(init): error" in line]
        assert len(said) == 1 and "refused the password of role agora" in said[0] and fix in said[0], said
        found = stack.probe("slurm-small", [("postgres", password, "postgres")])
        assert "password authentication failed" in found["postgres@postgres"], found
    finally:
        stack.exec("postgres", fix)  # the documented step, run whatever happened above
    done = stack.run_once("airflow-init")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    found = stack.probe("slurm-small", [("postgres", password, "postgres"), *FORMER_PASSWORDS[2:]])
    assert found["postgres@postgres"] == "accepted" and "password authentication" in found["agora@agora_traces"], found
