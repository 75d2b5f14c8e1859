#!/usr/bin/env bash
# Airflow's secrets in docker/compose.yaml. Every file is private to its writer from the moment it
# exists: made by mktemp (mode 0600) beside its place, filled, then renamed onto it, so that no one
# ever sees it with a wider mode or half written. docker/entrypoint.sh runs this as user airflow.
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
# file in DIR, the variable that may give its value, the check of a given value, random bytes when generated
KEYS=(
  "jwt_secret AIRFLOW_JWT_SECRET check_signing_key $SIGNING_KEY_MIN_BYTES"
  "api_secret_key AIRFLOW_API_SECRET_KEY check_signing_key $SIGNING_KEY_MIN_BYTES"
  "fernet_key AIRFLOW_FERNET_KEY check_fernet_keys 32"
)

say() { echo "secrets: $*" >&2; }
die() { say "error: $*"; exit 1; }

write_private() {  # write_private FILE: stdin into FILE, mode 0600 from the moment it exists
  local file="$1" tmp
  tmp="$(mktemp "$file.XXXXXX")"
  if ! cat >"$tmp"; then
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

make_keys() {  # make_keys DIR
  local dir="$1" entry file name check bytes
  [ -d "$dir" ] || die "no folder $dir (the airflow-secrets volume)"
  for entry in "${KEYS[@]}"; do  # every given value first: a refused one leaves every file as it was
    read -r file name check bytes <<<"$entry"
    [ -z "${!name:-}" ] || "$check" "$name" "${!name}"
  done
  for entry in "${KEYS[@]}"; do
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

case "${1:-}" in
  keys)
    [ "$#" -eq 2 ] || die "usage: secrets.sh keys DIR"
    make_keys "$2"
    ;;
  admin-password)
    [ "$#" -eq 2 ] || die "usage: secrets.sh admin-password FILE"
    write_admin_password "$2"
    ;;
  *)
    die "usage: secrets.sh keys DIR | secrets.sh admin-password FILE"
    ;;
esac
