"""docker/airflow/secrets.sh, and docker/entrypoint.sh's use of it, run here without Docker.

The entrypoint runs with stand-ins on PATH for what this machine lacks or a test must not do:
``id -u`` answers 0 (the roles run as root in the image), ``setpriv`` runs its command as the caller
(there is no user airflow here), ``chown`` does nothing, ``chmod`` logs its arguments before it runs,
and ``airflow`` and ``agora`` only log their arguments and the mode of the files that must be private
by then. Every run has umask 022, the image's: a file created with open() or ``>`` is then readable
by all until someone chmods it, which the chmod log shows.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.deploy.test_docker import DOCKER, ENTRYPOINT

SECRETS = DOCKER / "airflow" / "secrets.sh"
# The key files and the variables that may give their values.
KEYS = {
    "jwt_secret": "AIRFLOW_JWT_SECRET",
    "api_secret_key": "AIRFLOW_API_SECRET_KEY",
    "fernet_key": "AIRFLOW_FERNET_KEY",
}
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"  # Airflow's default name, in AIRFLOW_HOME
STANDINS = {
    "id": '[ "$*" = -u ] && { echo 0; exit 0; }; exec /usr/bin/id "$@"',
    "setpriv": 'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do shift; done; shift; exec "$@"',
    "chown": "exit 0",
    "chmod": 'echo "chmod $*" >>"$STANDIN_LOG"; exec /bin/chmod "$@"',
    "airflow": '{ echo "airflow $*"; for f in $WATCH; do stat -c "mode %a %n" "$f"; done; } >>"$STANDIN_LOG"',
    "agora": 'echo "agora $*" >>"$STANDIN_LOG"',
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


def test_init_makes_the_keys_private_before_airflow_first_runs(scratch: Scratch) -> None:
    scratch.secrets.mkdir()  # the volume's mount point, as Docker makes it
    watched = f"{scratch.secrets} {scratch.secrets}/*"
    done = scratch.run(ENTRYPOINT, "init", AIRFLOW_SECRETS_DIR=str(scratch.secrets), WATCH=watched)
    assert done.returncode == 0, done.stderr
    log = scratch.logged()
    migrate = log.index("airflow db migrate")
    seen = {line.split()[2]: line.split()[1] for line in log[migrate + 1 : migrate + 5]}
    assert seen == {str(scratch.secrets): "700"} | {str(scratch.secrets / name): "600" for name in KEYS}, log
    assert not any(chmodded(scratch, scratch.secrets / name) for name in KEYS), log
    refused = scratch.run(ENTRYPOINT, "init")
    assert refused.returncode != 0 and "AIRFLOW_SECRETS_DIR" in refused.stderr


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
