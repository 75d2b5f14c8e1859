#!/usr/bin/env bash
# The secrets of docker/compose.yaml, made by its one-shot `secrets` service before any other starts
# (docker/entrypoint.sh secrets). Every file is private to its folder's owner from the moment it
# exists: made by mktemp (mode 0600) beside its place, given the folder's owner when run as root,
# filled, then renamed onto it, so that no one ever sees it with a wider mode or half written.
#
#   secrets.sh keys DIR             the keys every Airflow component shares, one file each in DIR
#                                   (the airflow-secrets volume; compose.yaml's components read them
#                                   with AIRFLOW__<SECTION>__<KEY>_CMD):
#                                     jwt_secret      [api_auth] jwt_secret: signs the REST API's and
#                                                     the tasks' tokens (HS512)
#                                     api_secret_key  [api] secret_key: signs the log server's tokens
#                                     fernet_key      [core] fernet_key: encrypts connections and variables
#                                   A value given in the environment (AIRFLOW_JWT_SECRET,
#                                   AIRFLOW_API_SECRET_KEY, AIRFLOW_FERNET_KEY) is written; else the
#                                   file already there is kept; else one is generated from
#                                   /dev/urandom (url-safe base64; 64 bytes for the signing keys,
#                                   32 for the Fernet key). Every given value is checked before any
#                                   file is written: a signing key of at least 64 bytes (RFC 7518
#                                   asks that of an HS512 key; the public defaults compose.yaml had
#                                   before issue 32 are shorter); Fernet keys, comma-separated (the
#                                   first encrypts, each decrypts), of 32 url-safe base64-encoded bytes.
#   secrets.sh databases AIRFLOW_DIR AGORA_DIR POSTGRES_DIR REDIS_DIR
#                                   the passwords of PostgreSQL's roles and of Redis, made as the keys
#                                   are (given: POSTGRES_PASSWORD, AIRFLOW_DB_PASSWORD,
#                                   AGORA_DB_PASSWORD, REDIS_PASSWORD, each checked first: no control
#                                   character; else kept; else 32 random bytes), and what is built
#                                   from them, written anew each time:
#                                     POSTGRES_DIR/postgres_password    the superuser's
#                                     POSTGRES_DIR/airflow_db_password  role AIRFLOW_DB_USER's
#                                     POSTGRES_DIR/agora_db_password    role AGORA_DB_USER's
#                                     REDIS_DIR/redis_password          Redis's requirepass
#                                     REDIS_DIR/redis.conf              that requirepass line, for
#                                                                       redis-server's standard input
#                                     AIRFLOW_DIR/sql_alchemy_conn      postgresql+psycopg://USER:PASSWORD@
#                                                                       POSTGRES_ADDRESS/NAME of AIRFLOW_DB_*
#                                     AIRFLOW_DIR/celery_result_backend db+ and that URL
#                                     AIRFLOW_DIR/celery_broker_url     redis://:PASSWORD@REDIS_ADDRESS/0
#                                     AGORA_DIR/trace_store_url         the URL of AGORA_DB_* ([agora]
#                                                                       trace_store_url)
#                                   AIRFLOW_DB_USER, AIRFLOW_DB_NAME, AGORA_DB_USER, AGORA_DB_NAME,
#                                   POSTGRES_ADDRESS and REDIS_ADDRESS (HOST:PORT) are required; user
#                                   names, database names and passwords are percent-encoded in the URLs.
#   secrets.sh admin-password FILE  the simple auth manager's passwords file
#                                   ([core] simple_auth_manager_passwords_file): with
#                                   AIRFLOW_ADMIN_PASSWORD, {"$AIRFLOW_ADMIN_USER": password}; without
#                                   it, an empty file unless FILE exists, which the api-server then
#                                   fills with a generated password (printed in its log), keeping
#                                   the file's mode.
#
# Exit codes: 0 done; 1 a value or an argument refused (one line on stderr naming it; no file changed).
set -euo pipefail

SIGNING_KEY_MIN_BYTES=64
PASSWORD_BYTES=32
# file, the variable that may give its value, the check of a given value, random bytes when generated
KEYS=(
  "jwt_secret AIRFLOW_JWT_SECRET check_signing_key $SIGNING_KEY_MIN_BYTES"
  "api_secret_key AIRFLOW_API_SECRET_KEY check_signing_key $SIGNING_KEY_MIN_BYTES"
  "fernet_key AIRFLOW_FERNET_KEY check_fernet_keys 32"
)
POSTGRES_PASSWORDS=(
  "postgres_password POSTGRES_PASSWORD check_password $PASSWORD_BYTES"
  "airflow_db_password AIRFLOW_DB_PASSWORD check_password $PASSWORD_BYTES"
  "agora_db_password AGORA_DB_PASSWORD check_password $PASSWORD_BYTES"
)
REDIS_PASSWORDS=("redis_password REDIS_PASSWORD check_password $PASSWORD_BYTES")
# What the URLs are built from besides the passwords
URL_PARTS=(AIRFLOW_DB_USER AIRFLOW_DB_NAME AGORA_DB_USER AGORA_DB_NAME POSTGRES_ADDRESS REDIS_ADDRESS)

say() { echo "secrets: $*" >&2; }
die() { say "error: $*"; exit 1; }

write_private() {  # write_private FILE: stdin into FILE, mode 0600 and its folder's owner's from the moment it exists
  local file="$1" tmp
  tmp="$(mktemp "$file.XXXXXX")"
  if ! { [ "$(id -u)" != 0 ] || chown "$(stat -c %u:%g "$(dirname "$file")")" "$tmp"; } || ! cat >"$tmp"; then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$file"
}

random_key() {  # random_key BYTES: that many bytes of /dev/urandom in url-safe base64, no newline
  head -c "$1" /dev/urandom | base64 -w0 | tr '+/' '-_'
}

check_signing_key() {  # check_signing_key VARIABLE VALUE
  local name="$1" value="$2" bytes
  bytes="$(printf '%s' "$value" | wc -c)"
  [ "$bytes" -ge "$SIGNING_KEY_MIN_BYTES" ] \
    || die "$name has $bytes bytes, fewer than the $SIGNING_KEY_MIN_BYTES of an HS512 key: give a longer one, or none to have one generated"
}

check_fernet_keys() {  # check_fernet_keys VARIABLE VALUE (never printed: it is a secret)
  local name="$1" value="$2" key='[A-Za-z0-9_-]{43}='
  [[ "$value" =~ ^$key(,$key)*$ ]] \
    || die "$name is not a comma-separated list of Fernet keys (32 url-safe base64-encoded bytes, 44 characters, each; make one with: python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
}

check_password() {  # check_password VARIABLE VALUE (never printed)
  local name="$1" value="$2"
  [[ ! "$value" =~ [[:cntrl:]] ]] \
    || die "$name holds a control character (a newline?): give a password on one line, or none to have one generated"
}

check_given() {  # check_given ENTRY...: the check of each entry's value given in the environment
  local entry file name check bytes
  for entry in "$@"; do
    read -r file name check bytes <<<"$entry"
    [ -z "${!name:-}" ] || "$check" "$name" "${!name}"
  done
}

make_secrets() {  # make_secrets DIR ENTRY...: each entry's file in DIR, written from its variable, kept or generated
  local dir="$1" entry file name check bytes
  shift
  for entry in "$@"; do
    read -r file name check bytes <<<"$entry"
    if [ -n "${!name:-}" ]; then
      printf '%s' "${!name}" | write_private "$dir/$file"
      say "$dir/$file: written from $name"
    elif [ -s "$dir/$file" ]; then
      say "$dir/$file: kept"
    else
      random_key "$bytes" | write_private "$dir/$file"
      say "$dir/$file: generated"
    fi
  done
}

make_keys() {  # make_keys DIR
  local dir="$1"
  [ -d "$dir" ] || die "no folder $dir (the airflow-secrets volume)"
  check_given "${KEYS[@]}"  # every given value first: a refused one leaves every file as it was
  make_secrets "$dir" "${KEYS[@]}"
}

percent_encoded() {  # percent_encoded: stdin with every byte but letters, digits and -._~ percent-encoded
  python -c 'import sys, urllib.parse; sys.stdout.write(urllib.parse.quote(sys.stdin.buffer.read(), safe=""))'
}

postgres_url() {  # postgres_url USER PASSWORD_FILE DATABASE: the psycopg 3 URL of that role and database
  local user password database
  user="$(printf '%s' "$1" | percent_encoded)"
  password="$(percent_encoded <"$2")"
  database="$(printf '%s' "$3" | percent_encoded)"
  printf 'postgresql+psycopg://%s:%s@%s/%s' "$user" "$password" "$POSTGRES_ADDRESS" "$database"
}

redis_conf() {  # redis_conf PASSWORD_FILE: a requirepass line, the password double-quoted as redis.conf reads it
  local password
  password="$(<"$1")"
  password="${password//\\/\\\\}"
  printf 'requirepass "%s"\n' "${password//\"/\\\"}"
}

make_databases() {  # make_databases AIRFLOW_DIR AGORA_DIR POSTGRES_DIR REDIS_DIR
  local airflow="$1" agora="$2" postgres="$3" redis="$4" dir name
  for dir in "$@"; do
    [ -d "$dir" ] || die "no folder $dir (a secrets volume)"
  done
  for name in "${URL_PARTS[@]}"; do
    [ -n "${!name:-}" ] || die "set $name (what the database and broker URLs are built from)"
  done
  check_given "${POSTGRES_PASSWORDS[@]}" "${REDIS_PASSWORDS[@]}"
  make_secrets "$postgres" "${POSTGRES_PASSWORDS[@]}"
  make_secrets "$redis" "${REDIS_PASSWORDS[@]}"
  redis_conf "$redis/redis_password" | write_private "$redis/redis.conf"
  postgres_url "$AIRFLOW_DB_USER" "$postgres/airflow_db_password" "$AIRFLOW_DB_NAME" | write_private "$airflow/sql_alchemy_conn"
  { printf 'db+'; cat "$airflow/sql_alchemy_conn"; } | write_private "$airflow/celery_result_backend"
  { printf 'redis://:'; percent_encoded <"$redis/redis_password"; printf '@%s/0' "$REDIS_ADDRESS"; } \
    | write_private "$airflow/celery_broker_url"
  postgres_url "$AGORA_DB_USER" "$postgres/agora_db_password" "$AGORA_DB_NAME" | write_private "$agora/trace_store_url"
  say "$redis/redis.conf, $airflow/{sql_alchemy_conn,celery_result_backend,celery_broker_url}, $agora/trace_store_url: written"
}

write_admin_password() {  # write_admin_password FILE
  local file="$1" content
  [ -d "$(dirname "$file")" ] || die "no folder $(dirname "$file") for the passwords file"
  if [ -n "${AIRFLOW_ADMIN_PASSWORD:-}" ]; then
    content="$(AIRFLOW_ADMIN_USER="${AIRFLOW_ADMIN_USER:-admin}" python -c \
      'import json, os; print(json.dumps({os.environ["AIRFLOW_ADMIN_USER"]: os.environ["AIRFLOW_ADMIN_PASSWORD"]}))')"
    printf '%s\n' "$content" | write_private "$file"
    say "$file: the password of ${AIRFLOW_ADMIN_USER:-admin} from AIRFLOW_ADMIN_PASSWORD"
  elif [ ! -e "$file" ]; then
    write_private "$file" </dev/null
    say "$file: empty; the api-server generates the password of ${AIRFLOW_ADMIN_USER:-admin} and prints it in its log"
  fi
}

USAGE="usage: secrets.sh keys DIR | secrets.sh databases AIRFLOW_DIR AGORA_DIR POSTGRES_DIR REDIS_DIR | secrets.sh admin-password FILE"
case "${1:-}" in
  keys)
    [ "$#" -eq 2 ] || die "usage: secrets.sh keys DIR"
    make_keys "$2"
    ;;
  databases)
    [ "$#" -eq 5 ] || die "usage: secrets.sh databases AIRFLOW_DIR AGORA_DIR POSTGRES_DIR REDIS_DIR"
    make_databases "${@:2}"
    ;;
  admin-password)
    [ "$#" -eq 2 ] || die "usage: secrets.sh admin-password FILE"
    write_admin_password "$2"
    ;;
  *)
    die "$USAGE"
    ;;
esac
