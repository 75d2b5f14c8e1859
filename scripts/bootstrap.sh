#!/usr/bin/env bash
# Create .venv and install agora with its dependencies, once per change of setup.cfg.
# Usage: source scripts/bootstrap.sh   (sets $VENV and puts it first on PATH)
# AGORA_EXTRAS: the extras of setup.cfg to install, comma-separated (default dev; empty: none,
# as docker/Dockerfile does).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
EXTRAS="${AGORA_EXTRAS-dev}"

pick_python() {
  for candidate in "${PYTHON:-}" python3.11 python3.12 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 12)))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "agora needs Python 3.11 or 3.12 (set PYTHON=...)" >&2
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(pick_python)"
  echo "creating $VENV with $($PY --version)" >&2
  "$PY" -m venv "$VENV" || { echo "python venv failed: on Debian, apt-get install python3-venv" >&2; exit 1; }
fi
STAMP="$VENV/.agora-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
[ "$EXTRAS" = dev ] || WANT="$WANT extras=$EXTRAS"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "installing agora and its dependencies into $VENV (first run takes a minute or two)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export VENV
