"""docker/: what can be checked on a machine with the docker client but no Docker engine.

Nothing here builds or runs the image. The tests check that

- docker/compose.yaml validates with a real Compose client (``docker compose config``, or Debian's
  ``docker-compose`` 1.29 that scripts/install_compose.sh installs; neither needs an engine for this)
  and describes the deployment: the services and their Airflow 3.3 commands, one configuration for
  every Airflow component and compute node, the two databases on the one PostgreSQL, healthchecks,
  start order by conditions, the shared volumes, two compute nodes of different sizes; no secret
  with a default, each secrets volume mounted only where it is read, and the URLs and passwords
  that docker/secrets.sh writes there (run here with the secrets service's environment) naming what
  PostgreSQL and Redis are given;
- a malformed copy of it is refused (the validator is real);
- docker/Dockerfile installs agora with scripts/bootstrap.sh, the script the tests use, copies what
  the install and the entrypoint need, and the build context lets those files in; every script
  under docker/ passes ``bash -n``; bootstrap.sh's AGORA_EXTRAS keeps ``[dev]`` as its default;
- docker/catalog.yaml loads and describes the nodes and partitions of the slurm.conf that the
  containers write (docker/slurm/write-slurm-conf.sh, run here with each container's environment).

The Compose client is installed with apt-get when absent: in CI (CI=true) a failed install fails the
tests that need it; elsewhere they skip with the reason.
"""

from __future__ import annotations

import configparser
import functools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.settings import SETTINGS
from tests.conftest import REPO

DOCKER = REPO / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
DOCKERIGNORE = DOCKER / "Dockerfile.dockerignore"
ENTRYPOINT = DOCKER / "entrypoint.sh"
SECRETS_SCRIPT = DOCKER / "secrets.sh"
INIT_DATABASES = DOCKER / "postgres" / "init-databases.sh"
CATALOG = DOCKER / "catalog.yaml"
WRITE_SLURM_CONF = DOCKER / "slurm" / "write-slurm-conf.sh"
INSTALL_COMPOSE = REPO / "scripts" / "install_compose.sh"
BOOTSTRAP = REPO / "scripts" / "bootstrap.sh"

AIRFLOW_COMMANDS = {
    "airflow-apiserver": ["airflow", "api-server"],
    "airflow-scheduler": ["airflow", "scheduler"],
    "airflow-dag-processor": ["airflow", "dag-processor"],
    "airflow-triggerer": ["airflow", "triggerer"],
}
AIRFLOW_SERVICES = ("airflow-init", *AIRFLOW_COMMANDS)
NODES = ("slurm-small", "slurm-large")
WORKERS = {"celery-small": "pool_small", "celery-large": "pool_large"}  # Celery worker service -> the pool it serves
EXTERNAL_IMAGES = ("postgres", "redis")  # the services that do not run the agora image
# The containers that write a slurm.conf: the controller, the compute nodes, and the scheduler (a client).
SLURM_SERVICES = ("slurmctld", *NODES, "airflow-scheduler")
ONE_SHOT = ("secrets", "munge-key", "airflow-init")
EXECUTOR = "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor,CeleryExecutor"
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
IMAGE_ROOT = "/opt/agora"  # WORKDIR of the Dockerfile: the repository's files are copied under it
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


# -- the Compose client ------------------------------------------------------------------------


class ComposeMissingError(RuntimeError):
    """scripts/install_compose.sh found no client and could not install one."""


@functools.cache
def compose_argv() -> tuple[str, ...]:
    """The command of a Compose client (installed by scripts/install_compose.sh when absent)."""
    try:
        done = subprocess.run(["bash", str(INSTALL_COMPOSE)], capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ComposeMissingError(f"{INSTALL_COMPOSE.name}: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip():
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise ComposeMissingError(f"{INSTALL_COMPOSE.name} exited {done.returncode}: {tail}")
    return tuple(shlex.split(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def compose() -> tuple[str, ...]:
    try:
        return compose_argv()
    except ComposeMissingError as exc:
        if IN_CI:
            pytest.fail(f"a Compose client must be installable in CI: {exc}")
        pytest.skip(f"no Compose client here: {exc}")


def compose_env() -> dict[str, str]:
    """This process's environment without the variables compose.yaml reads: the tests check its defaults."""
    read = set(re.findall(r"\$\{(\w+)", COMPOSE_FILE.read_text()))
    return {k: v for k, v in os.environ.items() if k not in read and not k.startswith("COMPOSE_")}


def run_config(compose: tuple[str, ...], compose_file: Path, env_file: Path) -> subprocess.CompletedProcess[str]:
    """``config`` of ``compose_file``; ``env_file`` (empty) stands in for a docker/.env a developer may have."""
    return subprocess.run(
        [*compose, "--env-file", str(env_file), "-f", str(compose_file), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=compose_env(),
    )


@pytest.fixture(scope="module")
def empty_env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compose-env") / "empty.env"
    path.write_text("")
    return path


@pytest.fixture(scope="module")
def config(compose: tuple[str, ...], empty_env_file: Path) -> dict[str, Any]:
    """The compose file as the client resolves it (interpolated, anchors merged, paths absolute)."""
    done = run_config(compose, COMPOSE_FILE, empty_env_file)
    assert done.returncode == 0, f"{' '.join(compose)} config refused {COMPOSE_FILE}:\n{done.stderr}"
    document = yaml.safe_load(done.stdout)
    assert isinstance(document, dict) and isinstance(document.get("services"), dict), done.stdout[:2000]
    return document


# -- reading the resolved configuration ----------------------------------------------------------


def service(config: dict[str, Any], name: str) -> dict[str, Any]:
    spec = config["services"].get(name)
    assert isinstance(spec, dict), f"compose.yaml has no service {name!r}"
    return spec


def environment(config: dict[str, Any], name: str) -> dict[str, str]:
    raw = service(config, name).get("environment") or {}
    if isinstance(raw, list):  # KEY=VALUE items
        raw = dict(item.split("=", 1) for item in raw)
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def mounts(config: dict[str, Any], name: str) -> dict[str, str]:
    """Mount target -> source (a named volume or a host path), short or long syntax."""
    found: dict[str, str] = {}
    for item in service(config, name).get("volumes") or []:
        if isinstance(item, str):
            source, target = item.split(":")[:2]
        else:
            source, target = str(item.get("source", "")), str(item["target"])
        found[target] = source
    return found


def mount_of(config: dict[str, Any], name: str, path: str) -> tuple[str, str] | None:
    """(target, source) of the deepest mount of service ``name`` that holds ``path``, or None."""
    best = None
    for target, source in mounts(config, name).items():
        if (path == target or path.startswith(target.rstrip("/") + "/")) and (
            best is None or len(target) > len(best[0])
        ):
            best = (target, source)
    return best


def source_of(config: dict[str, Any], name: str, path: str) -> str | None:
    """The volume or host path that holds ``path`` in service ``name`` (its deepest mount), or None."""
    found = mount_of(config, name, path)
    return None if found is None else found[1]


def depends_on(config: dict[str, Any], name: str) -> dict[str, str]:
    """Dependency -> condition ("" when listed without one)."""
    raw = service(config, name).get("depends_on") or {}
    if isinstance(raw, list):
        return {str(dep): "" for dep in raw}
    return {str(dep): str((spec or {}).get("condition", "")) for dep, spec in raw.items()}


def waits_for(config: dict[str, Any], name: str, dependency: str) -> bool:
    """Whether service ``name`` starts only after ``dependency``, directly or through its dependencies."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep in depends_on(config, todo.pop()):
            if dep == dependency:
                return True
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return False


def read_only(config: dict[str, Any], name: str, target: str) -> bool:
    """Whether the service mounts ``target`` read-only (short or long syntax)."""
    for item in service(config, name).get("volumes") or []:
        if isinstance(item, str) and item.split(":")[1] == target:
            return "ro" in item.split(":")[2:3]
        if isinstance(item, dict) and item.get("target") == target:
            return bool(item.get("read_only"))
    raise AssertionError(f"{name} does not mount {target}")


def published_ports(config: dict[str, Any], name: str) -> list[tuple[str, str, int]]:
    """(host address, host port, container port) of each port the service publishes, short or long
    syntax; the address is "" where the port is published on every interface."""
    found: list[tuple[str, str, int]] = []
    for port in service(config, name).get("ports") or []:
        if isinstance(port, dict):
            found.append((str(port.get("host_ip") or ""), str(port.get("published", "")), int(port["target"])))
            continue
        parts = str(port).split("/")[0].rsplit(":", 2)  # [[ADDRESS:]PORT:]TARGET[/PROTOCOL]
        address = parts[0] if len(parts) == 3 else ""
        published = parts[-2] if len(parts) >= 2 else ""
        found.append((address, published, int(parts[-1])))
    return found


def healthcheck_test(config: dict[str, Any], name: str) -> str:
    check = service(config, name).get("healthcheck") or {}
    assert check and not check.get("disable"), f"service {name} has no healthcheck"
    test = check.get("test")
    return " ".join(test) if isinstance(test, list) else str(test)


# -- slurm.conf as the containers write it -------------------------------------------------------


def write_slurm_conf(env: dict[str, str], out: Path) -> str:
    """Run docker/slurm/write-slurm-conf.sh with a container's environment; the file's text."""
    done = subprocess.run(
        ["bash", str(WRITE_SLURM_CONF), str(out)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out.read_text()


def parse_slurm_conf(text: str) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]], dict[str, str]]:
    """(NodeName lines by name, PartitionName lines by name, the other settings)."""
    nodes: dict[str, dict[str, str]] = {}
    partitions: dict[str, dict[str, str]] = {}
    settings: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = dict(token.split("=", 1) for token in line.split())
        if line.startswith("NodeName="):
            nodes[fields["NodeName"]] = fields
        elif line.startswith("PartitionName="):
            partitions[fields["PartitionName"]] = fields
        else:
            settings.update(fields)
    return nodes, partitions, settings


# -- the compose file ------------------------------------------------------------------------------


def test_compose_config_lists_every_service_with_its_command(config: dict[str, Any]) -> None:
    services = config["services"]
    expected = {"postgres", "redis", "munge-key", *AIRFLOW_SERVICES, "slurmctld", *NODES, *WORKERS}
    assert expected <= set(services), f"missing: {sorted(expected - set(services))}"
    for name, argv in AIRFLOW_COMMANDS.items():
        assert service(config, name)["command"] == argv, name
    assert service(config, "airflow-init")["command"] == ["init"]  # the entrypoint runs `airflow db migrate`
    assert service(config, "slurmctld")["command"] == ["slurmctld"]
    for node in NODES:
        assert service(config, node)["command"] == ["slurmd"], node
    for name, pool in WORKERS.items():
        argv = service(config, name)["command"]
        assert argv[:3] == ["airflow", "celery", "worker"] and argv[argv.index("--queues") + 1] == pool, name
    # Every service but PostgreSQL and Redis runs the one image, built from the repository with docker/Dockerfile.
    ours = [name for name in services if name not in EXTERNAL_IMAGES]
    assert len({service(config, name)["image"] for name in ours}) == 1
    for name in ours:
        build = service(config, name)["build"]
        assert Path(build["context"]).resolve() == REPO, name
        assert build["dockerfile"] in ("docker/Dockerfile", str(DOCKERFILE)), name
    # ... whose entrypoint knows each role the services ask for.
    roles = set(re.findall(r"^  ([\w-]+)\)$", ENTRYPOINT.read_text(), re.MULTILINE))
    for name in ours:
        assert service(config, name)["command"][0] in roles, (
            f"{name}: entrypoint.sh has no role {service(config, name)['command'][0]!r}"
        )


def test_every_airflow_process_gets_the_same_configuration(config: dict[str, Any]) -> None:
    envs = {name: environment(config, name) for name in (*AIRFLOW_SERVICES, *NODES, *WORKERS)}
    reference = envs["airflow-scheduler"]
    agora = {k: v for k, v in reference.items() if k.startswith("AIRFLOW__AGORA__")}
    shared = [
        "AIRFLOW_HOME",
        "AIRFLOW__CORE__EXECUTOR",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AIRFLOW__CORE__DAGS_FOLDER",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER",
    ]
    for name, env in envs.items():
        assert {k: v for k, v in env.items() if k.startswith("AIRFLOW__AGORA__")} == agora, name
        for key in shared:
            assert key in env and env[key] == reference[key], f"{name}: {key}"
    assert reference["AIRFLOW__CORE__EXECUTOR"] == EXECUTOR
    # The database and the broker (the scheduler's CeleryExecutor sends where the workers read): every
    # Airflow component and Celery worker from the same file; no compute node, under any name.
    for key in DATABASE_AND_BROKER:
        for name in (*AIRFLOW_SERVICES, *WORKERS):
            assert envs[name].get(f"{key}_CMD") == reference[f"{key}_CMD"], f"{name}: {key}_CMD"
        for node in NODES:
            assert not [k for k in envs[node] if k.startswith(key)], f"{node}: {key}"
    # The keys are [agora] settings (a misspelt one would be ignored silently; a sensitive one may be
    # read from a command, ..._CMD), and the essential ones are set.
    declared = {setting.key for setting in SETTINGS}
    sensitive = {setting.key for setting in SETTINGS if setting.sensitive}
    keys = {k.removeprefix("AIRFLOW__AGORA__").lower() for k in agora}
    keys = {k.removesuffix("_cmd") if k.removesuffix("_cmd") in sensitive else k for k in keys}
    assert keys <= declared, f"not [agora] settings: {sorted(keys - declared)}"
    for key in ("catalog", "trace_store_url", "state_dir", "plan_dir"):
        assert agora.get(f"AIRFLOW__AGORA__{key.upper()}") or agora.get(f"AIRFLOW__AGORA__{key.upper()}_CMD"), key
    # Tasks, on the compute nodes too, call back to the api-server service.
    api = urlsplit(reference["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert api.hostname == "airflow-apiserver" and api.path.rstrip("/") == "/execution"
    assert api.port in {target for _, _, target in published_ports(config, "airflow-apiserver")}


# -- the secrets, as the secrets service writes them ----------------------------------------------------

# The folders the secrets service writes (its environment names them), each one a volume.
SECRETS_DIRS = ("AIRFLOW_SECRETS_DIR", "AGORA_SECRETS_DIR", "POSTGRES_SECRETS_DIR", "REDIS_SECRETS_DIR")
# Who mounts each secrets volume besides the secrets service, which writes them all.
SECRETS_READERS = {
    "airflow-secrets": {*AIRFLOW_SERVICES, *WORKERS},  # Airflow's keys, its database's and broker's URLs
    "agora-secrets": {*AIRFLOW_SERVICES, *WORKERS, *NODES},  # the trace store's URL: tasks write their rows
    "postgres-secrets": {"postgres"},
    "redis-secrets": {"redis"},
}
DATABASE_AND_BROKER = (
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC",
    "AIRFLOW__CELERY__BROKER_URL",
    "AIRFLOW__CELERY__RESULT_BACKEND",
)
TRACE_STORE = "AIRFLOW__AGORA__TRACE_STORE_URL"


@pytest.fixture(scope="module")
def secrets_volumes(config: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """What the secrets service writes, made here: docker/secrets.sh run as its role runs it
    (entrypoint.sh secrets), with the service's environment, a scratch folder standing for each
    volume. Volume name -> folder."""
    env = environment(config, "secrets")
    root = tmp_path_factory.mktemp("secrets-volumes")
    folders: dict[str, Path] = {}
    for variable in SECRETS_DIRS:
        volume = source_of(config, "secrets", env[variable])
        assert volume is not None, f"the secrets service writes {env[variable]} on no volume"
        folders[variable] = root / volume
        folders[variable].mkdir()
    env |= {variable: str(folder) for variable, folder in folders.items()}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    for argv in (["keys", env["AIRFLOW_SECRETS_DIR"]], ["databases", *(env[variable] for variable in SECRETS_DIRS)]):
        done = subprocess.run(
            ["bash", str(SECRETS_SCRIPT), *argv], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
    return {folder.name: folder for folder in folders.values()}


def secret_file(config: dict[str, Any], name: str, path: str, volumes: dict[str, Path]) -> Path:
    """The file that ``path`` is in service ``name``: in the scratch folder of the secrets volume there."""
    mount = mount_of(config, name, path)
    assert mount is not None and mount[1] in volumes, f"{name}: {path} is on no secrets volume"
    return volumes[mount[1]] / Path(path).relative_to(mount[0])


def airflow_setting(config: dict[str, Any], name: str, variable: str, volumes: dict[str, Path]) -> str:
    """What Airflow reads in service ``name`` for ``variable`` (AIRFLOW__SECTION__KEY): its value, else
    the output of its ..._CMD, which must read a file with cat."""
    env = environment(config, name)
    if variable in env:
        return env[variable]
    program, _, path = env.get(f"{variable}_CMD", "").partition(" ")
    assert program == "cat" and path, f"{name}: {variable} is neither set nor read from a file"
    return secret_file(config, name, path, volumes).read_text()


def test_one_postgres_holds_the_metadata_database_and_the_trace_store(
    config: dict[str, Any], secrets_volumes: dict[str, Path]
) -> None:
    postgres = environment(config, "postgres")
    metadata = make_url(
        airflow_setting(config, "airflow-scheduler", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", secrets_volumes)
    )
    traces = make_url(airflow_setting(config, "airflow-scheduler", TRACE_STORE, secrets_volumes))
    init_script = INIT_DATABASES.read_text()
    for url, prefix in ((metadata, "AIRFLOW_DB"), (traces, "AGORA_DB")):
        assert url.drivername == "postgresql+psycopg"  # psycopg 3, installed with agora
        assert (url.host, url.port) == ("postgres", 5432)
        assert url.username == postgres[f"{prefix}_USER"]
        # The password PostgreSQL gives the role: the file of the postgres-secrets volume.
        given = secret_file(config, "postgres", postgres[f"{prefix}_PASSWORD_FILE"], secrets_volumes)
        assert url.password == given.read_text() and len(given.read_text()) >= 32
        assert url.database == postgres[f"{prefix}_NAME"]
        for suffix in ("USER", "PASSWORD", "NAME"):  # the init script creates what the URL names
            assert prefix + "_" + suffix in init_script
    assert metadata.database != traces.database, "two databases"
    assert metadata.password != traces.password, "two passwords"
    # The same URL wherever Airflow or a task reads it: the compute nodes read the trace store's only.
    for name in (*AIRFLOW_SERVICES, *WORKERS, *NODES):
        assert airflow_setting(config, name, TRACE_STORE, secrets_volumes) == traces.render_as_string(False), name
    # Airflow derives an asyncpg URL unless told: the image has psycopg 3, which serves both.
    env = environment(config, "airflow-scheduler")
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC_CMD"] == env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"]
    initdb = mounts(config, "postgres")
    script = next(
        (source for target, source in initdb.items() if target.startswith("/docker-entrypoint-initdb.d/")), None
    )
    assert script is not None and Path(script).resolve() == INIT_DATABASES
    assert "pg_isready" in healthcheck_test(config, "postgres")


# Airflow's keys, which every Airflow component reads from one file each of the secrets volume:
# (section, option) -> the file.
AIRFLOW_KEYS = {
    ("api_auth", "jwt_secret"): "jwt_secret",
    ("api", "secret_key"): "api_secret_key",
    ("core", "fernet_key"): "fernet_key",
}
SECRETS_VOLUME = "airflow-secrets"
# Variables of compose.yaml that hold a secret: none may have a default (issue 32).
SECRET_VARIABLE = re.compile(r"SECRET|FERNET|PASSWORD|TOKEN|^AIRFLOW_CONN_")


def test_no_secret_has_a_default_and_airflow_reads_its_keys_from_the_secrets_volume(config: dict[str, Any]) -> None:
    defaults = re.findall(r"\$\{(\w+):?-([^}]*)\}", COMPOSE_FILE.read_text())
    given = {name: default for name, default in defaults if SECRET_VARIABLE.search(name) and default}
    assert not given, f"secrets with a default in compose.yaml: {sorted(given)}"
    for name in config["services"]:  # nor is one written out: no URL with a password in any environment
        for variable, value in environment(config, name).items():
            assert "://" not in value or urlsplit(value).password is None, f"{name}: {variable} holds a password"
    folder = environment(config, "secrets")["AIRFLOW_SECRETS_DIR"]
    assert source_of(config, "secrets", folder) == SECRETS_VOLUME and not read_only(config, "secrets", folder)
    assert SECRETS_VOLUME in (config.get("volumes") or {})
    for name in (*AIRFLOW_SERVICES, *WORKERS):
        env = environment(config, name)
        for (section, option), file in AIRFLOW_KEYS.items():
            variable = f"AIRFLOW__{section.upper()}__{option.upper()}"
            assert variable not in env, f"{name}: {variable} is set in compose.yaml"
            assert env.get(f"{variable}_CMD") == f"cat {folder}/{file}", f"{name}: {variable}_CMD"
        assert source_of(config, name, folder) == SECRETS_VOLUME, name
        assert read_only(config, name, folder), f"{name} may write Airflow's keys"
    for node in NODES:  # tasks run there as airflow: the JWT secret would let one mint an admin token
        assert source_of(config, node, folder) is None, node
        assert [key for key in environment(config, node) if key.endswith("_CMD")] == [f"{TRACE_STORE}_CMD"], node


def test_each_secrets_volume_is_mounted_only_where_it_is_read(config: dict[str, Any]) -> None:
    secrets = environment(config, "secrets")
    written = {source_of(config, "secrets", secrets[variable]): secrets[variable] for variable in SECRETS_DIRS}
    assert set(written) == set(SECRETS_READERS) <= set(config.get("volumes") or {}), written
    for volume, folder in written.items():
        assert not read_only(config, "secrets", folder), f"the secrets service cannot write {volume}"
        readers = {name for name in config["services"] if volume in mounts(config, name).values()} - {"secrets"}
        assert readers == SECRETS_READERS[volume], f"{volume} is mounted by {sorted(readers)}"
        for name in readers:
            target = next(target for target, source in mounts(config, name).items() if source == volume)
            assert read_only(config, name, target), f"{name} may write {volume}"
    # The secrets service needs no one, and runs before anyone reads them: the services that start
    # with them wait for it; the compute nodes read the trace store's URL in tasks only, which the
    # scheduler starts, and it waits.
    assert not depends_on(config, "secrets")
    for name in {reader for readers in SECRETS_READERS.values() for reader in readers} - set(NODES):
        assert waits_for(config, name, "secrets"), name
    assert waits_for(config, "airflow-scheduler", "secrets")


def test_postgres_and_redis_read_their_passwords_from_their_volumes(
    config: dict[str, Any], secrets_volumes: dict[str, Path]
) -> None:
    postgres = environment(config, "postgres")
    for prefix in ("POSTGRES", "AIRFLOW_DB", "AGORA_DB"):  # the image's POSTGRES_PASSWORD_FILE, and the roles'
        assert f"{prefix}_PASSWORD" not in postgres, f"postgres: {prefix}_PASSWORD is set in compose.yaml"
        given = secret_file(config, "postgres", postgres[f"{prefix}_PASSWORD_FILE"], secrets_volumes)
        assert given.stat().st_mode & 0o777 == 0o600 and len(given.read_text()) >= 32, given
    # The roles' files are read by init-databases.sh, as root, before the image's own entrypoint.
    spec = service(config, "postgres")
    assert spec["entrypoint"][0] in mounts(config, "postgres") and spec["command"] == ["postgres"]
    assert Path(mounts(config, "postgres")[spec["entrypoint"][0]]).resolve() == INIT_DATABASES
    # Redis: requirepass on its standard input, from its volume; the healthcheck authenticates.
    command = " ".join(service(config, "redis")["command"])
    conf = re.search(r"redis-server .* - <(\S+)$", command)
    assert conf is not None, f"redis reads no configuration on its standard input: {command}"
    password = secret_file(config, "redis", conf[1], secrets_volumes).parent / "redis_password"
    assert secret_file(config, "redis", conf[1], secrets_volumes).read_text().startswith("requirepass ")
    assert "REDISCLI_AUTH" in healthcheck_test(config, "redis") and f"cat {Path(conf[1]).parent}/" in (
        healthcheck_test(config, "redis")
    )
    broker = urlsplit(airflow_setting(config, "airflow-scheduler", "AIRFLOW__CELERY__BROKER_URL", secrets_volumes))
    assert (broker.scheme, broker.hostname, broker.port, broker.path) == ("redis", "redis", 6379, "/0")
    assert unquote(broker.password or "") == password.read_text() and len(password.read_text()) >= 32


def test_only_the_api_server_is_published_on_the_hosts_loopback(
    config: dict[str, Any], compose: tuple[str, ...], tmp_path: Path
) -> None:
    assert published_ports(config, "airflow-apiserver") == [("127.0.0.1", "8080", 8080)]
    for name in config["services"]:  # PostgreSQL and Redis above all: default passwords, and none
        assert name == "airflow-apiserver" or not published_ports(config, name), f"{name} is published"
    # A deployer who puts a proxy in front or wants every interface says so.
    env_file = tmp_path / "public.env"
    env_file.write_text("AIRFLOW_HOST_IP=0.0.0.0\nAIRFLOW_PORT=18080\n")
    done = run_config(compose, COMPOSE_FILE, env_file)
    assert done.returncode == 0, done.stderr
    assert published_ports(yaml.safe_load(done.stdout), "airflow-apiserver") == [("0.0.0.0", "18080", 8080)]


def test_start_order_uses_conditions_and_healthchecks(config: dict[str, Any]) -> None:
    services = config["services"]
    for name in services:
        for dep, condition in depends_on(config, name).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert condition in CONDITIONS, f"{name} -> {dep}: no condition"
            if condition == "service_healthy":
                healthcheck_test(config, dep)
        if name in ONE_SHOT:
            assert str(service(config, name).get("restart", "no")) in ("no", "False"), name
        else:
            healthcheck_test(config, name)
    assert depends_on(config, "airflow-init")["postgres"] == "service_healthy"
    for name in ("postgres", "redis", "airflow-init"):  # each reads what the secrets service writes
        assert depends_on(config, name).get("secrets") == "service_completed_successfully", name
    for name in AIRFLOW_COMMANDS:
        deps = depends_on(config, name)
        assert deps.get("postgres") == "service_healthy", name
        assert deps.get("airflow-init") == "service_completed_successfully", name
    scheduler = depends_on(config, "airflow-scheduler")
    for dep in ("slurmctld", *NODES, "redis"):
        assert scheduler.get(dep) == "service_healthy", dep
    for name in ("slurmctld", *NODES):
        assert depends_on(config, name).get("munge-key") == "service_completed_successfully", name
    for name in WORKERS:  # a worker's tasks call back to the api-server and report to the broker
        deps = depends_on(config, name)
        assert deps.get("redis") == deps.get("airflow-apiserver") == "service_healthy", name
        assert deps.get("airflow-init") == "service_completed_successfully", name

    # No cycle: compose would wait forever.
    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert state.get(name) != "open", f"dependency cycle: {' -> '.join((*path, name))}"
        if state.get(name) == "done":
            return
        state[name] = "open"
        for dep in depends_on(config, name):
            visit(dep, (*path, name))
        state[name] = "done"

    for name in services:
        visit(name, ())


def test_each_shared_volume_is_first_mounted_by_one_service_that_the_others_wait_for(config: dict[str, Any]) -> None:
    # Docker copies the image's content at the mount path into a named volume at its first mount: two
    # containers created at once that both mount a new volume race there (CI: slurm-large "failed to
    # mkdir .../agora-data/_data/models: file exists" beside slurm-small). So each volume that several
    # services mount has one that mounts it first, and every other one waits for it.
    named = set(config.get("volumes") or {})
    for volume in sorted(named):
        users = sorted(name for name in config["services"] if volume in mounts(config, name).values())
        if len(users) < 2:
            continue
        firsts = [first for first in users if all(waits_for(config, other, first) for other in users if other != first)]
        assert firsts, f"volume {volume}: none of {users} is mounted before all the others"


def test_state_dir_dags_logs_and_munge_key_are_shared_volumes(config: dict[str, Any]) -> None:
    env = environment(config, "airflow-scheduler")
    named = set(config.get("volumes") or {})
    for path in (
        env["AIRFLOW__AGORA__STATE_DIR"],  # the compute nodes run tasks in these job directories
        env["AIRFLOW__AGORA__PLAN_DIR"],
        env["AIRFLOW__CORE__DAGS_FOLDER"],
        env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"],
    ):
        sources = {name: source_of(config, name, path) for name in (*AIRFLOW_SERVICES, *NODES)}
        assert len(set(sources.values())) == 1 and None not in sources.values(), f"{path}: {sources}"
    for path in (env["AIRFLOW__CORE__DAGS_FOLDER"], env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]):
        for name in WORKERS:  # a worker's tasks parse the DAGs and write logs that the api-server reads
            assert source_of(config, name, path) == source_of(config, "airflow-apiserver", path), (name, path)
    for path in (env["AIRFLOW__AGORA__STATE_DIR"], env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]):
        assert source_of(config, "airflow-scheduler", path) in named, f"{path} is not on a named volume"
    dags = source_of(config, "airflow-scheduler", env["AIRFLOW__CORE__DAGS_FOLDER"])
    assert dags is not None and Path(dags).resolve() == REPO / "dags"
    keys = {name: source_of(config, name, "/etc/munge/munge.key") for name in ("munge-key", *SLURM_SERVICES)}
    assert len(set(keys.values())) == 1 and next(iter(keys.values())) in named, keys


def test_slurm_containers_share_one_cluster_and_the_scheduler_is_a_client(config: dict[str, Any]) -> None:
    shapes = {
        name: {k: v for k, v in environment(config, name).items() if k.startswith("SLURM_")} for name in SLURM_SERVICES
    }
    reference = shapes["slurmctld"]
    assert reference and all(shape == reference for shape in shapes.values()), shapes
    assert service(config, "slurmctld").get("hostname") == reference["SLURM_CONTROLLER"]
    for node in NODES:  # slurmd finds its NodeName by host name; the controller reaches it by service name
        assert service(config, node).get("hostname") == node
        assert environment(config, node)["SLURMD_NODENAME"] == node
    assert environment(config, "airflow-scheduler").get("AGORA_SLURM_CLIENT", "").lower() == "true"


def test_compute_nodes_have_different_sizes(config: dict[str, Any], tmp_path: Path) -> None:
    texts = {name: write_slurm_conf(environment(config, name), tmp_path / f"{name}.conf") for name in SLURM_SERVICES}
    assert len(set(texts.values())) == 1, "every SLURM container must write the same slurm.conf"
    sizes = {}
    for node in NODES:
        nodes, _, _ = parse_slurm_conf(texts[node])
        line = nodes[environment(config, node)["SLURMD_NODENAME"]]
        sizes[node] = (int(line["CPUs"]), int(line["RealMemory"]))
    (small_cpus, small_mib), (large_cpus, large_mib) = sizes["slurm-small"], sizes["slurm-large"]
    assert small_cpus < large_cpus and small_mib < large_mib, sizes
    _, partitions, settings = parse_slurm_conf(texts["slurmctld"])
    assert {partitions[p]["Nodes"] for p in partitions} == set(NODES), "one partition per node"
    assert settings["SlurmctldHost"] == "slurmctld"


def test_malformed_compose_file_copy_validates_when_intact(
    compose: tuple[str, ...], tmp_path: Path, empty_env_file: Path
) -> None:
    copy = tmp_path / "compose.yaml"
    copy.write_text(COMPOSE_FILE.read_text())
    done = run_config(compose, copy, empty_env_file)
    assert done.returncode == 0, done.stderr


BREAKAGES: dict[str, tuple[Callable[[str], str], str]] = {
    "unknown key": (lambda text: text.replace("    healthcheck:", "    healthcheck_typo:", 1), "healthcheck_typo"),
    "invalid condition": (
        lambda text: text.replace("condition: service_completed_successfully", "condition: service_done", 1),
        "service_done",
    ),
    "undefined dependency": (
        lambda text: text.replace("      munge-key:\n        condition:", "      munge-keys:\n        condition:", 1),
        "munge-keys",
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_malformed_compose_file_is_refused(
    compose: tuple[str, ...], tmp_path: Path, empty_env_file: Path, breakage: str
) -> None:
    edit, culprit = BREAKAGES[breakage]
    text = COMPOSE_FILE.read_text()
    broken = edit(text)
    assert broken != text, f"the edit for {breakage!r} no longer applies to compose.yaml"
    copy = tmp_path / "compose.yaml"
    copy.write_text(broken)
    done = run_config(compose, copy, empty_env_file)
    assert done.returncode != 0, f"{breakage}: accepted\n{done.stdout[:1000]}"
    assert culprit in done.stdout + done.stderr, done.stderr


# -- the image ---------------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    found: list[tuple[str, str]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        instruction, _, rest = current.partition(" ")
        found.append((instruction.upper(), " ".join(rest.split())))
        current = ""
    return found


def copy_sources(arguments: str) -> list[str]:
    """The sources of a COPY (flags and the destination dropped)."""
    words = [word for word in shlex.split(arguments) if not word.startswith("--")]
    return words[:-1]


def test_dockerfile_installs_agora_with_the_tests_bootstrap_script() -> None:
    steps = dockerfile_instructions(DOCKERFILE.read_text())
    froms = [args for instruction, args in steps if instruction == "FROM"]
    assert len(froms) == 1 and re.fullmatch(r"python:3\.11[\w.-]*-bookworm", froms[0]), froms
    apt = " ".join(args for instruction, args in steps if instruction == "RUN" and "apt-get install" in args)
    for package in ("slurmctld", "slurmd", "slurm-client", "munge"):
        assert re.search(rf"(?<![\w-]){package}(?![\w-])", apt), package
    boot = [
        i for i, (instruction, args) in enumerate(steps) if instruction == "RUN" and "bash scripts/bootstrap.sh" in args
    ]
    assert len(boot) == 1, "the image installs agora with scripts/bootstrap.sh"
    assert "source scripts/bootstrap.sh" in (REPO / "scripts" / "test.sh").read_text(), "the tests use it too"
    workdir = [args for instruction, args in steps[: boot[0]] if instruction == "WORKDIR"]
    assert workdir and workdir[-1] == IMAGE_ROOT

    # What pip needs to build agora is copied before the install: setup.cfg's long_description file
    # and the module its version is read from.
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    long_description = setup["metadata"]["long_description"].removeprefix("file:").strip()
    version_module = setup["metadata"]["version"].removeprefix("attr:").strip().rsplit(".", 1)[0]
    before = {src for instruction, args in steps[: boot[0]] if instruction == "COPY" for src in copy_sources(args)}
    needed = {"setup.cfg", "pyproject.toml", "scripts/bootstrap.sh", long_description}
    needed.add(version_module.replace(".", "/") + "/__init__.py")
    assert needed <= before, f"copied after the install or not at all: {sorted(needed - before)}"
    every = [src for instruction, args in steps if instruction == "COPY" for src in copy_sources(args)]
    for src in every:
        assert (REPO / src).exists(), f"COPY {src}: no such file in the repository"
    # The package, the shipped model (found beside it), catalogs, workflows, the DAGs and docker/ itself.
    for src in ("agora_optimizer", "models", "catalogs", "workflows", "dags", "docker"):
        assert src in every, src
    entrypoint = [args for instruction, args in steps if instruction == "ENTRYPOINT"]
    assert entrypoint and f"{IMAGE_ROOT}/docker/entrypoint.sh" in entrypoint[-1]

    # The extras asked for exist in setup.cfg (none by default: no dev tools in the image).
    extras = set(setup["options.extras_require"])
    arg = next(args for instruction, args in steps if instruction == "ARG" and args.startswith("AGORA_EXTRAS"))
    default = shlex.split(arg.partition("=")[2]) or [""]
    asked = {extra.strip() for extra in default[0].split(",") if extra.strip()}
    assert asked <= extras, f"no such extras in setup.cfg: {sorted(asked - extras)}"

    # The build context (BuildKit reads Dockerfile.dockerignore) lets every copied file in, and not .venv.
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    allowed = {pattern[1:] for pattern in patterns if pattern.startswith("!")}
    assert patterns[0] == "**"
    for src in every:
        assert any(src == top or src.startswith(top + "/") for top in allowed), (
            f"{src} is kept out of the build context"
        )
    assert not any(top == ".venv" or top.startswith(".venv/") for top in allowed)


def _scratch_bootstrap(tree: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """scripts/bootstrap.sh, setup.cfg and pyproject.toml copied into ``tree``; a runner of that copy.

    The runner takes extra environment variables; AGORA_EXTRAS, AGORA_VENV and PYTHON are unset
    unless given.
    """
    (tree / "scripts").mkdir()
    (tree / "scripts" / "bootstrap.sh").write_text(BOOTSTRAP.read_text())
    for name in ("setup.cfg", "pyproject.toml"):
        (tree / name).write_text((REPO / name).read_text())
    base = {k: v for k, v in os.environ.items() if k not in ("AGORA_EXTRAS", "AGORA_VENV", "PYTHON")}

    def run(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(tree / "scripts" / "bootstrap.sh")],
            env=base | extra,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


def test_bootstrap_installs_dev_extras_by_default_and_agora_extras_when_asked(tmp_path: Path) -> None:
    """scripts/bootstrap.sh in a scratch tree whose .venv/bin/python only records its arguments."""
    run_bootstrap = _scratch_bootstrap(tmp_path)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    log = tmp_path / "pip.log"
    python.write_text(f'#!/bin/sh\necho "$*" >>{shlex.quote(str(log))}\n')
    python.chmod(0o755)
    stamp = tmp_path / ".venv" / ".agora-installed"

    def bootstrap(**extra: str) -> tuple[str, str]:
        log.unlink(missing_ok=True)
        done = run_bootstrap(**extra)
        assert done.returncode == 0, done.stderr
        return (log.read_text() if log.exists() else ""), stamp.read_text().strip()

    calls, dev_stamp = bootstrap()
    assert f"-m pip install --quiet -e {tmp_path}[dev]" in calls
    assert bootstrap() == ("", dev_stamp), "installed again although nothing changed"
    assert bootstrap(AGORA_EXTRAS="dev") == ("", dev_stamp), "AGORA_EXTRAS=dev is the default"
    calls, none_stamp = bootstrap(AGORA_EXTRAS="")
    assert f"-m pip install --quiet -e {tmp_path}\n" in calls and none_stamp != dev_stamp
    calls, _ = bootstrap(AGORA_EXTRAS="dev,bench")
    assert f"-m pip install --quiet -e {tmp_path}[dev,bench]" in calls
    stamp.unlink()
    calls, _ = bootstrap(AGORA_INSTALLER="uv")  # the Dockerfile's: uv installs, and goes
    assert calls.splitlines() == [
        "-m pip install --quiet uv",
        f"-m uv pip install --quiet --python {python} -e {tmp_path}[dev]",
        "-m pip uninstall --quiet --yes uv",
    ]
    wrong = run_bootstrap(AGORA_INSTALLER="conda")
    assert wrong.returncode == 1 and "AGORA_INSTALLER is pip or uv, not 'conda'" in wrong.stderr
    steps = dockerfile_instructions(DOCKERFILE.read_text())
    instruction = next(args for kind, args in steps if kind == "RUN" and "bootstrap.sh" in args)
    assert "AGORA_INSTALLER=uv" in instruction


def _fake_python(path: Path, version: str, log: Path) -> Path:
    """A "python" that says it is ``version``, makes venvs of itself and records every other call."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *"sys.exit(not"*) exit 0 ;;\n'
        f'  *"print("*) echo {version} ;;\n'
        f'  --version) echo "Python {version}.0" ;;\n'
        '  "-m venv "*) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;\n'
        f'  *) echo "$0 $*" >>{shlex.quote(str(log))} ;;\n'
        "esac\n"
    )
    path.chmod(0o755)
    return path


def test_bootstrap_keeps_dot_venv_and_gives_another_python_its_own_venv(tmp_path: Path) -> None:
    """.venv by default; PYTHON of another X.Y than .venv's: .venv-X.Y; AGORA_VENV: that directory."""
    run_bootstrap = _scratch_bootstrap(tmp_path)
    log = tmp_path / "pip.log"
    _fake_python(tmp_path / ".venv" / "bin" / "python", "3.11", log)
    py311 = _fake_python(tmp_path / "py" / "python3.11", "3.11", log)
    py313 = _fake_python(tmp_path / "py" / "python3.13", "3.13", log)

    def installed_into(**extra: str) -> str:
        log.unlink(missing_ok=True)
        done = run_bootstrap(**extra)
        assert done.returncode == 0, done.stderr
        calls = log.read_text().splitlines() if log.exists() else []
        pip = [line for line in calls if "pip install --quiet -e" in line]
        return str(Path(pip[0].split()[0]).parent.parent.relative_to(tmp_path)) if pip else ""

    assert installed_into() == ".venv"
    assert installed_into(PYTHON=str(py313)) == ".venv-3.13"
    assert installed_into(PYTHON=str(py313)) == "", "installed again although nothing changed"
    assert installed_into(PYTHON=str(py311)) == "", ".venv is 3.11's already"
    assert installed_into(AGORA_VENV=str(tmp_path / "elsewhere"), PYTHON=str(py313)) == "elsewhere"
    refused = run_bootstrap(PYTHON=str(tmp_path / "py" / "python3.9"))
    assert refused.returncode != 0 and "agora needs Python 3.11 to 3.13" in refused.stderr


def test_every_script_of_the_image_parses() -> None:
    scripts = [*sorted(DOCKER.rglob("*.sh")), INSTALL_COMPOSE]
    assert {ENTRYPOINT, WRITE_SLURM_CONF, DOCKER / "postgres" / "init-databases.sh"} <= set(scripts)
    for script in scripts:
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n"), script
        assert "\nset -euo pipefail\n" in text, script
        assert os.access(script, os.X_OK), f"{script} is not executable"
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, f"{script}: {done.stderr}"


# -- the catalog and the SLURM cluster ------------------------------------------------------------------


def test_catalog_describes_the_nodes_and_partitions_of_the_containers_slurm_conf(
    config: dict[str, Any], tmp_path: Path
) -> None:
    catalog = load_catalog(CATALOG)
    nodes, partitions, _ = parse_slurm_conf(write_slurm_conf(environment(config, "slurmctld"), tmp_path / "slurm.conf"))
    slurm = [r for r in catalog.resources if r.backend == "slurm"]
    assert {str(r.extra.get("partition")) for r in slurm} == set(partitions)
    for resource in slurm:
        members = partitions[str(resource.extra["partition"])]["Nodes"].split(",")
        assert resource.count == len(members), resource.name
        for member in members:
            assert int(nodes[member]["CPUs"]) == resource.vcpus, (resource.name, member)
            assert int(nodes[member]["RealMemory"]) == round(resource.memory_gib * 1024), (resource.name, member)
    # The deployment uses this file (copied to /opt/agora/docker/) and names one of its resources as default.
    env = environment(config, "airflow-scheduler")
    assert f"{IMAGE_ROOT}/{CATALOG.relative_to(REPO)}" in env["AIRFLOW__AGORA__CATALOG"].split(",")
    assert env["AIRFLOW__AGORA__DEFAULT_RESOURCE"] in {r.name for r in catalog.resources}


def _gib(size: str) -> float:
    """A Compose memory size (``2g``, ``512m``, ``2147483648``) in GiB."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)b?", str(size).strip().lower())
    assert match is not None, f"not a memory size: {size!r}"
    return float(match[1]) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[match[2]] / 2**30


def _cpuset(value: str) -> set[int]:
    """The CPUs of a cpuset such as ``0``, ``1-3`` or ``0,2``."""
    cpus: set[int] = set()
    for part in str(value).split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def test_each_celery_worker_serves_a_pool_of_the_catalog_with_its_size(
    config: dict[str, Any], secrets_volumes: dict[str, Path]
) -> None:
    pools = {r.name: r for r in load_catalog(CATALOG).resources if r.backend == "celery"}
    assert set(pools) == set(WORKERS.values())
    env = environment(config, "airflow-scheduler")
    assert "CeleryExecutor" in env["AIRFLOW__CORE__EXECUTOR"].split(",")
    assert env["AIRFLOW__AGORA__CELERY_EXECUTOR"] == "CeleryExecutor"  # the name [core] executor lists
    broker = urlsplit(airflow_setting(config, "airflow-scheduler", "AIRFLOW__CELERY__BROKER_URL", secrets_volumes))
    assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379)
    assert "redis-cli" in healthcheck_test(config, "redis")
    results, metadata = (
        airflow_setting(config, "airflow-scheduler", variable, secrets_volumes)
        for variable in ("AIRFLOW__CELERY__RESULT_BACKEND", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    )
    assert results == "db+" + metadata
    sizes = {}
    for name, pool in WORKERS.items():
        spec, resource = service(config, name), pools[pool]
        argv = spec["command"]
        assert int(argv[argv.index("--concurrency") + 1]) == resource.vcpus, name  # one process per core
        assert argv[argv.index("--celery-hostname") + 1] == f"{pool}@%h", name  # the trace names the worker
        assert len(_cpuset(spec["cpuset"])) == resource.vcpus, name
        assert _gib(spec["mem_limit"]) == resource.memory_gib, name
        assert pool in healthcheck_test(config, name), name
        sizes[pool] = (resource.vcpus, resource.memory_gib)
    assert sizes["pool_small"] < sizes["pool_large"] and sizes["pool_small"][1] < sizes["pool_large"][1]
    assert not _cpuset(service(config, "celery-small")["cpuset"]) & _cpuset(service(config, "celery-large")["cpuset"])


def test_slurm_conf_writer_refuses_bad_sizes(tmp_path: Path) -> None:
    out = tmp_path / "slurm.conf"
    done = subprocess.run(
        ["bash", str(WRITE_SLURM_CONF), str(out)],
        env={"PATH": os.environ["PATH"], "SLURM_LARGE_CPUS": "eight"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0 and "SLURM_LARGE_CPUS" in done.stderr
    assert not out.exists()
