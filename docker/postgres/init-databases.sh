#!/usr/bin/env bash
# Run once by the postgres image (/docker-entrypoint-initdb.d/) when its data volume is empty:
# two roles and two databases on the one server, each database owned by its role:
#   AIRFLOW_DB_USER / AIRFLOW_DB_PASSWORD / AIRFLOW_DB_NAME   Airflow's metadata database
#   AGORA_DB_USER   / AGORA_DB_PASSWORD   / AGORA_DB_NAME     agora's trace store
# (defaults: airflow/airflow/airflow and agora/agora/agora). Connects as $POSTGRES_USER over the
# image's local socket (libpq's PGHOST/PGPORT, when set, point it elsewhere). Values are passed as
# psql variables, so a password may hold quotes. To change them later, use ALTER ROLE: this
# script does not run again on a volume that already holds data.
set -euo pipefail

create() {  # create USER PASSWORD DATABASE
  psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    -v role="$1" -v password="$2" -v database="$3" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', :'role', :'password')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'role')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'database') \gexec
SQL
  echo "init-databases: database $3 owned by $1"
}

create "${AIRFLOW_DB_USER:-airflow}" "${AIRFLOW_DB_PASSWORD:-airflow}" "${AIRFLOW_DB_NAME:-airflow}"
create "${AGORA_DB_USER:-agora}" "${AGORA_DB_PASSWORD:-agora}" "${AGORA_DB_NAME:-agora_traces}"
