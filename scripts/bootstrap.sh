#!/usr/bin/env bash
# Create a virtual environment and install agora with its dependencies, once per change of setup.cfg.
# Usage: source scripts/bootstrap.sh   (sets $VENV and puts it first on PATH)
# Python 3.11, 3.12 or 3.13 (setup.cfg's python_requires). Which one and which environment:
# - PYTHON unset: .venv, created with the first of python3.11, python3.12, python3.13, python3 that
#   is a supported Python (an existing .venv is used as it is);
# - PYTHON=python3.13 (a command or a path): .venv if it does not exist yet or was made with that
#   Python's X.Y, else .venv-X.Y (e.g. .venv-3.13), so several Pythons live side by side;
# - AGORA_VENV=DIR: that directory, whatever the Python.
# AGORA_EXTRAS: the extras of setup.cfg to install, comma-separated (default dev; empty: none,
# as docker/Dockerfile does). AGORA_INSTALLER: pip (default) or uv (docker/Dockerfile: uv from PyPI
# installs in half pip's time, trusting the system's certificate authorities, and is removed after).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRAS="${AGORA_EXTRAS-dev}"
INSTALLER="${AGORA_INSTALLER:-pip}"
case "$INSTALLER" in
  pip|uv) ;;
  *) echo "AGORA_INSTALLER is pip or uv, not '$INSTALLER'" >&2; exit 1 ;;
esac
SUPPORTED="3.11 to 3.13"

supported() {  # whether the command $1 runs a supported Python
  "$1" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null
}

x_y() {  # "3.13" for the command $1
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}

pick_python() {  # PYTHON if set (and nothing else: no silent fallback), else the first supported one
  local candidates=(python3.11 python3.12 python3.13 python3)
  [ -z "${PYTHON:-}" ] || candidates=("$PYTHON")
  for candidate in "${candidates[@]}"; do
    if command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then
      echo "$candidate"; return 0
    fi
  done
  echo "agora needs Python $SUPPORTED${PYTHON:+ (PYTHON=$PYTHON does not run one)}; set PYTHON=..." >&2
  return 1
}

PY=""
if [ -n "${AGORA_VENV:-}" ]; then
  VENV="$AGORA_VENV"
elif [ -z "${PYTHON:-}" ]; then
  VENV="$ROOT/.venv"
else
  PY="$(pick_python)"
  VENV="$ROOT/.venv"
  if [ -x "$VENV/bin/python" ] && [ "$(x_y "$VENV/bin/python")" != "$(x_y "$PY")" ]; then
    VENV="$ROOT/.venv-$(x_y "$PY")"
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  [ -n "$PY" ] || PY="$(pick_python)"
  echo "creating $VENV with $($PY --version)" >&2
  "$PY" -m venv "$VENV" || { echo "python venv failed: on Debian, apt-get install python3-venv" >&2; exit 1; }
fi
STAMP="$VENV/.agora-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
[ "$EXTRAS" = dev ] || WANT="$WANT extras=$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "installing agora and its dependencies into $VENV (first run takes a minute or two)" >&2
  if [ "$INSTALLER" = uv ]; then
    "$VENV/bin/python" -m pip install --quiet uv
    UV_NATIVE_TLS=1 "$VENV/bin/python" -m uv pip install --quiet --python "$VENV/bin/python" \
      -e "$ROOT${EXTRAS:+[$EXTRAS]}"
    "$VENV/bin/python" -m pip uninstall --quiet --yes uv
  else
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export VENV
