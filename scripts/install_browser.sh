#!/usr/bin/env bash
# Debian's chromium for the browser tests of the agora UI (tests/ui), driven by Playwright's Python
# API at /usr/bin/chromium: nothing is downloaded at run time, `playwright install` is never run.
#
# Usage: scripts/install_browser.sh     install chromium with apt-get if absent (idempotent); prints its path
#
# Needs root (or sudo) to install. Exit codes: 0 chromium is there (its path on stdout), 1 the install
# failed, 3 chromium is absent and cannot be installed here (no apt-get, or not root and no sudo).
# Timings on this 2-core VM: cold (apt-get update + install) about a minute; already installed 0.01 s.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"  # apt_get, apt_install, require_installer

BROWSER="${AGORA_CHROMIUM:-/usr/bin/chromium}"
LOG="${TMPDIR:-/tmp}/agora-install-browser.log"

say() { echo "install_browser: $*" >&2; }

if [ -x "$BROWSER" ]; then
  echo "$BROWSER"
  exit 0
fi
require_installer "install_browser: chromium is not at $BROWSER" "$0" "$@"

say "installing Debian's chromium (apt-get; log: $LOG)"
apt_install "$LOG" chromium fonts-dejavu-core || { say "apt-get install chromium failed (log: $LOG)"; exit 1; }
if [ ! -x "$BROWSER" ]; then
  say "apt-get installed chromium but $BROWSER is missing"
  exit 1
fi
echo "$BROWSER"
