#!/usr/bin/env bash
# PostgreSQL's roles and databases for docker/compose.yaml: two roles and two databases on the one
# server, each database owned by its role and open to it alone (CONNECT revoked from PUBLIC):
#   AIRFLOW_DB_USER / AIRFLOW_DB_PASSWORD / AIRFLOW_DB_NAME   Airflow's metadata database
#   AGORA_DB_USER   / AGORA_DB_PASSWORD   / AGORA_DB_NAME     agora's trace store
# and every role's password set to the one given, the superuser's ($POSTGRES_USER, POSTGRES_PASSWORD)
# too. Each password is its variable, else the content of the file that VARIABLE_FILE names (compose.yaml
# names the files of the postgres-secrets volume, root's alone, made by docker/secrets.sh). Run as:
#
#   init-databases.sh postgres ARGS...   the postgres service's entrypoint: reads the two roles'
#       password files here, as root, then runs the image's own entrypoint (docker-entrypoint.sh),
#       which reads POSTGRES_PASSWORD_FILE itself, as root too, before it drops to user postgres.
#       The image runs its init scripts as that user, who cannot read the files: their passwords
#       reach this script through the environment, as the superuser's does (the server's processes
#       keep them there, as the image keeps that one).
#   init-databases.sh                    by the image, from /docker-entrypoint-initdb.d/, when the
#       data volume is empty (once), as user postgres, with the passwords read already; or by hand,
#       as root, for a volume made before the passwords were generated (issue 32) or after one
#       changed in docker/.env: the image never runs it again on a volume that holds data, so
#         docker compose -f docker/compose.yaml exec postgres /docker-entrypoint-initdb.d/10-agora-databases.sh
#       gives the roles the passwords of the files (docs/deployment.md, Secrets).
#
# Connects as $POSTGRES_USER over the image's local socket (trusted; libpq's PGHOST/PGPORT, when set,
# point it elsewhere). Values are passed as psql variables, so a password may hold quotes. Idempotent.
set -euo pipefail

read_password_files() {  # read_password_files VARIABLE...: each unset VARIABLE from the file VARIABLE_FILE names
  local name file
  for name in "$@"; do
    file="${name}_FILE"
    if [ -z "${!name:-}" ] && [ -n "${!file:-}" ]; then
      export "$name=$(<"${!file}")"
      unset "$file"
    fi
  done
}

if [ "${1:-}" = postgres ]; then
  read_password_files AIRFLOW_DB_PASSWORD AGORA_DB_PASSWORD
  exec docker-entrypoint.sh "$@"
fi

read_password_files POSTGRES_PASSWORD AIRFLOW_DB_PASSWORD AGORA_DB_PASSWORD
for name in POSTGRES_PASSWORD AIRFLOW_DB_PASSWORD AGORA_DB_PASSWORD; do
  [ -n "${!name:-}" ] || { echo "init-databases: error: set $name or ${name}_FILE" >&2; exit 1; }
done
SUPERUSER="${POSTGRES_USER:-postgres}"

psql_as_superuser() {  # psql_as_superuser NAME=VALUE...: the SQL on stdin, with those psql variables
  local variables=() pair
  for pair in "$@"; do variables+=(-v "$pair"); done
  psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet --username "$SUPERUSER" --dbname postgres "${variables[@]}"
}

# psql reads each password from the environment (\getenv, PostgreSQL 15 and later): never in an argument.
set_password() {  # set_password ROLE PASSWORD_VARIABLE
  psql_as_superuser role="$1" password_variable="$2" <<'SQL'
\getenv password :password_variable
ALTER ROLE :"role" PASSWORD :'password';
SQL
  echo "init-databases: the password of $1 set"
}

create() {  # create ROLE PASSWORD_VARIABLE DATABASE
  psql_as_superuser role="$1" database="$3" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'role')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'role')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'database') \gexec
REVOKE CONNECT, TEMPORARY ON DATABASE :"database" FROM PUBLIC;
SQL
  set_password "$1" "$2"
  echo "init-databases: database $3 owned by $1, open to it alone"
}

set_password "$SUPERUSER" POSTGRES_PASSWORD
create "${AIRFLOW_DB_USER:-airflow}" AIRFLOW_DB_PASSWORD "${AIRFLOW_DB_NAME:-airflow}"
create "${AGORA_DB_USER:-agora}" AGORA_DB_PASSWORD "${AGORA_DB_NAME:-agora_traces}"
