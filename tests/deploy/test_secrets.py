"""docker/secrets.sh, docker/entrypoint.sh's use of it and docker/postgres/init-databases.sh, run here
without Docker.

The entrypoint runs with stand-ins on PATH for what this machine lacks or a test must not do:
``id -u`` answers 0 (the roles run as root in the image), ``setpriv`` runs its command as the caller
(there is no user airflow here), ``chown`` only logs its arguments, ``chmod`` logs its arguments
before it runs, and ``airflow`` and ``agora`` only log their arguments and the mode of the files that
must be private by then (or, given STANDIN_FAIL, print it and fail, as a step that PostgreSQL
refuses does). Every run has umask 022, the image's: a file created with open() or ``>`` is then
readable by all until someone chmods it, which the chmod log shows.

The passwords and URLs the secrets service writes are then given to the real servers: a private
PostgreSQL (made by init-databases.sh as root, as the documented step for an old volume does) and a
Redis reading requirepass on its standard input, as compose.yaml's redis service does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet
from kombu import Connection
from sqlalchemy.engine import make_url

from harness.local_airflow import free_port
from tests.deploy.test_docker import ENTRYPOINT, INIT_DATABASES, SECRETS_SCRIPT
from tests.faults.conftest import PrivatePostgres, _pg_bin
from tests.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]  # the fixture, used by name

SECRETS = SECRETS_SCRIPT
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The key files and the variables that may give their values.
KEYS = {
    "jwt_secret": "AIRFLOW_JWT_SECRET",
    "api_secret_key": "AIRFLOW_API_SECRET_KEY",
    "fernet_key": "AIRFLOW_FERNET_KEY",
}
# The password files of the postgres-secrets and redis-secrets volumes, and the variables that may give them.
POSTGRES_PASSWORDS = {
    "postgres_password": "POSTGRES_PASSWORD",
    "airflow_db_password": "AIRFLOW_DB_PASSWORD",
    "agora_db_password": "AGORA_DB_PASSWORD",
}
REDIS_PASSWORDS = {"redis_password": "REDIS_PASSWORD"}
# What the URLs are built from (compose.yaml's defaults), and the secrets folders, by the variable naming each.
URL_PARTS = {
    "AIRFLOW_DB_USER": "airflow",
    "AIRFLOW_DB_NAME": "airflow",
    "AGORA_DB_USER": "agora",
    "AGORA_DB_NAME": "agora_traces",
    "POSTGRES_ADDRESS": "postgres:5432",
    "REDIS_ADDRESS": "redis:6379",
}
FOLDERS = ("AIRFLOW_SECRETS_DIR", "AGORA_SECRETS_DIR", "POSTGRES_SECRETS_DIR", "REDIS_SECRETS_DIR")
# The passwords compose.yaml gave PostgreSQL's roles before issue 32 (role, password, its database), and
# the hint entrypoint.sh gives when PostgreSQL refuses the volume's.
FORMER_DEFAULTS = (
    ("postgres", "agora", "postgres"),
    ("airflow", "airflow", "airflow"),
    ("agora", "agora", "agora_traces"),
)
FIX = "docker compose -f docker/compose.yaml exec postgres /docker-entrypoint-initdb.d/10-agora-databases.sh"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"  # Airflow's default name, in AIRFLOW_HOME
STANDIN_FAIL = '[ -z "${STANDIN_FAIL:-}" ] || { echo "$STANDIN_FAIL" >&2; exit 1; }'
STANDINS = {
    "id": '[ "$*" = -u ] && { echo 0; exit 0; }; exec /usr/bin/id "$@"',
    "setpriv": 'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do shift; done; shift; exec "$@"',
    "chown": 'echo "chown $*" >>"$STANDIN_LOG"',
    "chmod": 'echo "chmod $*" >>"$STANDIN_LOG"; exec /bin/chmod "$@"',
    "airflow": '{ echo "airflow $*"; for f in $WATCH; do stat -c "mode %a %n" "$f"; done; } >>"$STANDIN_LOG"; '
    + STANDIN_FAIL,
    "agora": 'echo "agora $*" >>"$STANDIN_LOG"; ' + STANDIN_FAIL,
}


@dataclass
class Scratch:
    """A scratch AIRFLOW_HOME and secrets folder, the stand-ins, and a runner of the scripts among them."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    @property
    def log(self) -> Path:
        return self.root / "standins.log"

    def folder(self, variable: str) -> Path:
        """The scratch folder of a secrets volume (made), by the variable of the secrets service that names it."""
        path = self.root / variable.removesuffix("_SECRETS_DIR").lower()
        path.mkdir(exist_ok=True)
        return path

    def folders(self) -> dict[str, str]:
        return {variable: str(self.folder(variable)) for variable in FOLDERS}

    def run(self, *argv: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        """``argv`` under umask 022 with the stand-ins first on PATH and no AIRFLOW* variable but ``env``'s."""
        bin_dir = self.root / "bin"
        path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        full = base | {"PATH": path, "AIRFLOW_HOME": str(self.home), "STANDIN_LOG": str(self.log)} | env
        command = ["bash", "-c", 'umask 022 && exec "$@"', "umask", *map(str, argv)]
        return subprocess.run(command, env=full, capture_output=True, text=True, timeout=60, check=False)

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def scratch(tmp_path: Path) -> Scratch:
    found = Scratch(tmp_path)
    found.home.mkdir()
    (tmp_path / "bin").mkdir()
    for name, body in STANDINS.items():
        (tmp_path / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / "bin" / name).chmod(0o755)
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def chmodded(scratch: Scratch, path: Path) -> list[str]:
    """The chmod calls that named ``path``."""
    return [line for line in scratch.logged() if line.startswith("chmod ") and str(path) in shlex.split(line)]


def keys(scratch: Scratch, **given: str) -> subprocess.CompletedProcess[str]:
    scratch.secrets.mkdir(exist_ok=True)
    return scratch.run(SECRETS, "keys", scratch.secrets, **given)


def contents(folder: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(folder.iterdir())}


def databases(scratch: Scratch, **given: str) -> subprocess.CompletedProcess[str]:
    """secrets.sh databases into the scratch folders, with compose.yaml's names (``given`` wins)."""
    folders = [str(scratch.folder(variable)) for variable in FOLDERS]
    return scratch.run(SECRETS, "databases", *folders, **(URL_PARTS | given))


def secrets_made(scratch: Scratch) -> dict[str, str]:
    """Every file of the secrets folders (but Airflow's keys) by its path below the scratch root."""
    return {
        f"{path.parent.name}/{path.name}": path.read_text()
        for variable in FOLDERS
        for path in sorted(scratch.folder(variable).iterdir())
        if path.name not in KEYS
    }


def chowned(scratch: Scratch, path: Path) -> list[str]:
    """The owners given to ``path`` or to a temporary file beside it (mktemp's PATH.XXXXXX) by chown."""
    temporary = re.compile(re.escape(str(path)) + r"(\.\w{6})?")
    return [
        line.split()[1]
        for line in scratch.logged()
        if line.startswith("chown ") and temporary.fullmatch(line.split()[-1])
    ]


def test_database_passwords_are_generated_private_once_and_the_urls_built_from_them(scratch: Scratch) -> None:
    done = databases(scratch)
    assert done.returncode == 0, done.stderr
    made = secrets_made(scratch)
    postgres, redis = scratch.folder("POSTGRES_SECRETS_DIR"), scratch.folder("REDIS_SECRETS_DIR")
    airflow, agora = scratch.folder("AIRFLOW_SECRETS_DIR"), scratch.folder("AGORA_SECRETS_DIR")
    expected = {f"postgres/{name}" for name in POSTGRES_PASSWORDS} | {"redis/redis_password", "redis/redis.conf"}
    expected |= {f"airflow/{name}" for name in ("sql_alchemy_conn", "celery_result_backend", "celery_broker_url")}
    assert set(made) == expected | {"agora/trace_store_url"}, "a file missing, or a temporary file left behind"
    for folder in (postgres, redis, airflow, agora):
        for path in folder.iterdir():
            assert mode(path) == 0o600 and not chmodded(scratch, path), f"{path} was not private when it was made"
            assert chowned(scratch, path) == ["{0.st_uid}:{0.st_gid}".format(folder.stat())], (
                f"{path}: its folder's owner"
            )
    passwords = {name: (postgres / name).read_text() for name in POSTGRES_PASSWORDS} | {
        "redis_password": (redis / "redis_password").read_text()
    }
    assert len(set(passwords.values())) == 4 and all(len(value) >= 32 for value in passwords.values())
    # The URLs name the roles, databases and passwords PostgreSQL and Redis are given.
    metadata = make_url((airflow / "sql_alchemy_conn").read_text())
    assert (metadata.drivername, metadata.host, metadata.port) == ("postgresql+psycopg", "postgres", 5432)
    assert (metadata.username, metadata.password, metadata.database) == (
        "airflow", passwords["airflow_db_password"], "airflow"
    )  # fmt: skip
    traces = make_url((agora / "trace_store_url").read_text())
    assert (traces.username, traces.password, traces.database) == (
        "agora",
        passwords["agora_db_password"],
        "agora_traces",
    )
    assert (airflow / "celery_result_backend").read_text() == "db+" + (airflow / "sql_alchemy_conn").read_text()
    broker = Connection((airflow / "celery_broker_url").read_text())
    assert (broker.transport_cls, broker.hostname, broker.port, broker.virtual_host) == ("redis", "redis", 6379, "0")
    assert broker.password == passwords["redis_password"]
    # A second start keeps every password, and writes the same URLs.
    done = databases(scratch)
    assert done.returncode == 0 and secrets_made(scratch) == made, "a password changed on a second start"
    assert done.stderr.count(": kept") == 4, done.stderr


def test_given_passwords_win_and_a_bad_one_changes_nothing(scratch: Scratch) -> None:
    assert databases(scratch).returncode == 0
    generated = secrets_made(scratch)
    odd = 'a "quoted" pass\\word @:/%#?'  # what a URL or redis.conf must escape
    good = {"AIRFLOW_DB_PASSWORD": odd, "REDIS_PASSWORD": odd + "!", "AIRFLOW_DB_USER": "air flow"}
    refused = databases(scratch, **(good | {"POSTGRES_PASSWORD": "two\nlines"}))
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "POSTGRES_PASSWORD holds a control character" in refused.stderr and "two" not in refused.stderr
    assert secrets_made(scratch) == generated, "a password refused, but a file changed"
    refused = databases(scratch, REDIS_ADDRESS="")
    assert refused.returncode == 1 and "set REDIS_ADDRESS" in refused.stderr and secrets_made(scratch) == generated
    done = databases(scratch, **good)
    assert done.returncode == 0, done.stderr
    made = secrets_made(scratch)
    assert made["postgres/airflow_db_password"] == odd and made["redis/redis_password"] == odd + "!"
    for kept in ("postgres/postgres_password", "postgres/agora_db_password"):
        assert made[kept] == generated[kept]
    metadata = make_url(made["airflow/sql_alchemy_conn"])
    assert (metadata.username, metadata.password) == ("air flow", odd)
    assert Connection(made["airflow/celery_broker_url"]).password == odd + "!"
    assert made["redis/redis.conf"] == 'requirepass "a \\"quoted\\" pass\\\\word @:/%#?!"\n'


def test_the_secrets_role_makes_every_secret_private_for_its_readers(scratch: Scratch) -> None:
    done = scratch.run(ENTRYPOINT, "secrets", **scratch.folders(), **URL_PARTS)
    assert done.returncode == 0, done.stderr
    owners = {"AIRFLOW_SECRETS_DIR": "airflow", "AGORA_SECRETS_DIR": "airflow"}  # the others: root's
    for variable in FOLDERS:
        folder = scratch.folder(variable)
        owner = owners.get(variable, "root")
        assert chowned(scratch, folder) == [f"{owner}:{owner}"] and mode(folder) == 0o700, variable
        assert [path.name for path in folder.iterdir()], f"{variable}: nothing written"
        for path in folder.iterdir():  # each file its folder's owner's, 0600, before anything is in it
            assert mode(path) == 0o600 and not chmodded(scratch, path), path
            assert len(chowned(scratch, path)) == 1, path
    assert set(KEYS) <= {path.name for path in scratch.folder("AIRFLOW_SECRETS_DIR").iterdir()}
    refused = scratch.run(ENTRYPOINT, "secrets", **(scratch.folders() | {"REDIS_SECRETS_DIR": ""}), **URL_PARTS)
    assert refused.returncode == 1 and "set REDIS_SECRETS_DIR" in refused.stderr


def test_init_says_in_one_line_how_to_give_an_old_volume_its_passwords(scratch: Scratch) -> None:
    refusal = (
        'psycopg.OperationalError: connection failed: connection to server at "172.17.0.2", port 5432 failed: '
        'FATAL:  password authentication failed for user "airflow"'
    )
    refused = scratch.run(ENTRYPOINT, "init", STANDIN_FAIL=refusal)
    assert refused.returncode == 1 and scratch.logged()[-1] == "airflow db migrate", scratch.logged()
    last = refused.stderr.strip().splitlines()[-1]
    assert "PostgreSQL refused the password of role airflow" in last and FIX in last, refused.stderr
    assert refusal in refused.stderr, "the step's own error is shown too"
    other = scratch.run(ENTRYPOINT, "init", STANDIN_FAIL="could not translate host name")
    assert other.returncode == 1 and "refused the password" not in other.stderr, other.stderr
    assert scratch.run(ENTRYPOINT, "init").returncode == 0


def test_init_databases_as_the_entrypoint_reads_the_roles_files_then_runs_the_images(scratch: Scratch) -> None:
    postgres = scratch.folder("POSTGRES_SECRETS_DIR")
    assert databases(scratch).returncode == 0
    image = scratch.root / "bin" / "docker-entrypoint.sh"  # the image's own entrypoint: what it was given
    image.write_text('#!/bin/sh\n{ echo "args $*"; env; } >"$STANDIN_LOG.image"\n')
    image.chmod(0o755)
    files = {f"{variable}_FILE": str(postgres / name) for name, variable in POSTGRES_PASSWORDS.items()}
    done = scratch.run(INIT_DATABASES, "postgres", "-c", "fsync=off", **files)
    assert done.returncode == 0, done.stderr
    seen = (scratch.root / "standins.log.image").read_text().splitlines()
    assert seen[0] == "args postgres -c fsync=off"
    env = dict(line.split("=", 1) for line in seen[1:] if "=" in line)
    for name, variable in POSTGRES_PASSWORDS.items():
        if variable == "POSTGRES_PASSWORD":  # the image reads its own file, as root, before it drops to postgres
            assert env.get(f"{variable}_FILE") == str(postgres / name) and variable not in env
        else:  # the image's init scripts run as postgres, who cannot read the files: read here
            assert env.get(variable) == (postgres / name).read_text() and f"{variable}_FILE" not in env, variable


@pytest.fixture
def password_postgres() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL as the postgres image makes one: local connections trusted, TCP by password
    (scram-sha-256); in a folder the postgres user reaches (pytest's are root's alone)."""
    binaries = _pg_bin()
    if binaries is None:
        if IN_CI:
            pytest.fail("PostgreSQL must be installed in CI (scripts/start_postgres.sh installs it)")
        pytest.skip("no PostgreSQL binaries here (scripts/start_postgres.sh installs them)")
    root = Path(tempfile.mkdtemp(prefix="agora-secrets-pg-"))
    root.chmod(0o711)
    server = PrivatePostgres(root / "pg", binaries)
    try:
        server.init()
        (server.data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _login(url: str) -> str:
    """``user@database`` of a connection made with a SQLAlchemy URL; if refused, the error on one line."""
    parts = make_url(url)
    try:
        with psycopg.connect(
            host=parts.host, port=parts.port, user=parts.username, password=parts.password, dbname=parts.database,
            connect_timeout=10,
        ) as connection:  # fmt: skip
            row = connection.execute("SELECT current_user, current_database()").fetchone()
            return f"{row[0]}@{row[1]}" if row else ""
    except psycopg.OperationalError as exc:
        return " ".join(str(exc).split())


@pytest.mark.postgres
@pytest.mark.slow
def test_init_databases_gives_each_role_the_password_of_its_file(
    scratch: Scratch, password_postgres: PrivatePostgres
) -> None:
    address = {"POSTGRES_ADDRESS": f"127.0.0.1:{password_postgres.port}"}
    assert databases(scratch, **address, AIRFLOW_DB_PASSWORD='it\'s "odd" @:/%').returncode == 0
    postgres = scratch.folder("POSTGRES_SECRETS_DIR")
    files = {f"{variable}_FILE": str(postgres / name) for name, variable in POSTGRES_PASSWORDS.items()}
    socket = {"PGHOST": str(password_postgres.root), "PGPORT": str(password_postgres.port)}

    def init_databases() -> None:  # by hand, as root, as docs/deployment.md says for a volume of old passwords
        done = scratch.run(INIT_DATABASES, **files, **socket)
        assert done.returncode == 0, done.stderr

    init_databases()
    metadata = (scratch.folder("AIRFLOW_SECRETS_DIR") / "sql_alchemy_conn").read_text()
    traces = (scratch.folder("AGORA_SECRETS_DIR") / "trace_store_url").read_text()
    assert _login(metadata) == "airflow@airflow" and _login(traces) == "agora@agora_traces"
    superuser = make_url(metadata).set(username="postgres", password=(postgres / "postgres_password").read_text())
    assert _login(superuser.set(database="postgres").render_as_string(False)) == "postgres@postgres"
    for role, password, database in FORMER_DEFAULTS:  # compose.yaml's public passwords before issue 32
        old = make_url(metadata).set(username=role, password=password, database=database).render_as_string(False)
        assert "password authentication failed" in _login(old), role
    # Each role reaches its own database only.
    assert "permission denied" in _login(make_url(traces).set(database="airflow").render_as_string(False))
    # A password changed in docker/.env: refused until the step is run again; the step is idempotent.
    assert databases(scratch, **address, AIRFLOW_DB_PASSWORD="a new one").returncode == 0
    metadata = (scratch.folder("AIRFLOW_SECRETS_DIR") / "sql_alchemy_conn").read_text()
    assert "password authentication failed" in _login(metadata)
    init_databases()
    assert _login(metadata) == "airflow@airflow" and _login(traces) == "agora@agora_traces"


@pytest.mark.celery
@pytest.mark.slow
def test_redis_asks_the_password_of_redis_conf_on_its_standard_input(
    scratch: Scratch, redis_server: RedisServer
) -> None:
    # The session's server is not the one asked here: its fixture installs Redis where it is absent (or skips,
    # or fails in CI), as it does for the Celery tests; this test may run before any of them.
    server = shutil.which("redis-server")
    assert server is not None, redis_server
    port = free_port()
    odd = 'a "quoted" pass\\word @:/%'
    assert databases(scratch, REDIS_ADDRESS=f"127.0.0.1:{port}", REDIS_PASSWORD=odd).returncode == 0
    redis = scratch.folder("REDIS_SECRETS_DIR")
    argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "-"]
    with (redis / "redis.conf").open() as conf:  # as compose.yaml's redis service starts it
        process = subprocess.Popen(
            argv, stdin=conf, cwd=scratch.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
    try:
        broker = Connection((scratch.folder("AIRFLOW_SECRETS_DIR") / "celery_broker_url").read_text())
        broker.ensure_connection(max_retries=20, interval_start=0.1, interval_step=0.1)  # the broker URL's password
        assert (
            RedisServer(f"redis://127.0.0.1:{port}/0", scratch.root).command("PING")
            == b"-NOAUTH Authentication required."
        )
        broker.release()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_keys_are_generated_private_once_and_then_kept(scratch: Scratch) -> None:
    done = keys(scratch)
    assert done.returncode == 0, done.stderr
    made = contents(scratch.secrets)
    assert set(made) == set(KEYS), "a key file missing, or a temporary file left behind"
    for name in KEYS:
        path = scratch.secrets / name
        assert mode(path) == 0o600 and not chmodded(scratch, path), f"{name} was not private when it was made"
    Fernet(made["fernet_key"].encode())  # Airflow's get_fernet() reads it so
    assert len(made["jwt_secret"]) >= 64 and len(made["api_secret_key"]) >= 64  # HS512's key length
    assert len(set(made.values())) == 3 and not any(value.endswith("\n") for value in made.values())
    done = keys(scratch)
    assert done.returncode == 0 and contents(scratch.secrets) == made, "the keys changed on a second start"
    assert done.stderr.count(": kept") == 3, done.stderr


def test_given_keys_replace_the_files_and_a_bad_one_changes_nothing(scratch: Scratch) -> None:
    assert keys(scratch).returncode == 0
    generated = contents(scratch.secrets)
    new_fernet, old_fernet = Fernet.generate_key().decode(), generated["fernet_key"]
    good = {"AIRFLOW_JWT_SECRET": "j" * 64, "AIRFLOW_FERNET_KEY": f"{new_fernet},{old_fernet}"}  # a rotation
    for variable, value, culprit in [
        ("AIRFLOW_JWT_SECRET", "agora-compose-jwt-secret-change-me", "AIRFLOW_JWT_SECRET has 34 bytes"),
        ("AIRFLOW_API_SECRET_KEY", "a" * 63, "AIRFLOW_API_SECRET_KEY has 63 bytes"),
        ("AIRFLOW_FERNET_KEY", new_fernet[:-2] + "=", "AIRFLOW_FERNET_KEY is not"),
        ("AIRFLOW_FERNET_KEY", f"{new_fernet},", "AIRFLOW_FERNET_KEY is not"),
    ]:
        refused = keys(scratch, **(good | {variable: value}))
        assert refused.returncode == 1, (variable, value)
        assert refused.stderr.count("\n") == 1 and culprit in refused.stderr, refused.stderr
        assert value not in refused.stderr, "a secret printed"
        assert contents(scratch.secrets) == generated, f"{variable}={value!r} refused, but a file changed"
    done = keys(scratch, **good)
    assert done.returncode == 0, done.stderr
    assert contents(scratch.secrets) == generated | {"jwt_secret": "j" * 64, "fernet_key": good["AIRFLOW_FERNET_KEY"]}
    assert all(mode(path) == 0o600 for path in scratch.secrets.iterdir())


def test_the_admin_password_file_is_private_from_the_moment_it_exists(scratch: Scratch) -> None:
    passwords = scratch.home / PASSWORDS_FILE
    password = 'a "quoted" pass\\word'
    done = scratch.run(ENTRYPOINT, "airflow", "api-server", AIRFLOW_ADMIN_PASSWORD=password, WATCH=str(passwords))
    assert done.returncode == 0, done.stderr
    assert scratch.logged()[-2:] == ["airflow api-server", f"mode 600 {passwords}"], scratch.logged()
    assert not chmodded(scratch, passwords), "written readable by all, then chmodded"
    assert json.loads(passwords.read_text()) == {"admin": password}
    assert [path.name for path in scratch.home.iterdir()] == [PASSWORDS_FILE], "a temporary file left behind"


def test_without_a_password_the_api_server_fills_a_private_empty_file(scratch: Scratch) -> None:
    passwords = scratch.home / PASSWORDS_FILE
    done = scratch.run(ENTRYPOINT, "airflow", "api-server", AIRFLOW_ADMIN_USER="ops", WATCH=str(passwords))
    assert done.returncode == 0, done.stderr
    assert scratch.logged()[-1] == f"mode 600 {passwords}" and passwords.read_text() == ""
    passwords.write_text('{"ops": "generated by Airflow"}\n')  # what the api-server then wrote into it
    assert scratch.run(ENTRYPOINT, "airflow", "api-server").returncode == 0
    assert passwords.read_text() == '{"ops": "generated by Airflow"}\n', "a restart lost the generated password"
