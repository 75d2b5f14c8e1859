#!/usr/bin/env bash
# Debian's chromium for the browser tests of the agora UI (tests/ui), driven by Playwright's Python
# API at /usr/bin/chromium: nothing is downloaded at run time, `playwright install` is never run.
#
# Usage: scripts/install_browser.sh     install chromium with apt-get if absent (idempotent); prints its path
#
# Needs root (or sudo) to install. Exit codes: 0 chromium is there (its path on stdout), 1 the install
# failed, 3 chromium is absent and cannot be installed here (no apt-get, or not root and no sudo).
# Timings on this 2-core VM: cold (apt_get update + install) about a minute; already installed 0.01 s.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"  # apt_get, require_installer

BROWSER="${AGORA_CHROMIUM:-/usr/bin/chromium}"
LOG="${TMPDIR:-/tmp}/agora-install-browser.log"

say() { echo "install_browser: $*" >&2; }

if [ -x "$BROWSER" ]; then
  echo "$BROWSER"
  exit 0
fi
require_installer "install_browser: chromium is not at $BROWSER" "$0" "$@"

install() { DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends chromium fonts-dejavu-core >>"$LOG" 2>&1; }

say "installing Debian's chromium (apt-get; log: $LOG)"
if ! install; then
  apt_get update -qq >>"$LOG" 2>&1 || true
  install || { tail -20 "$LOG" >&2; say "apt-get install chromium failed (log: $LOG)"; exit 1; }
fi
if [ ! -x "$BROWSER" ]; then
  say "apt-get installed chromium but $BROWSER is missing"
  exit 1
fi
echo "$BROWSER"
