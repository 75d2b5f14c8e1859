# Sourced by the scripts that install Debian packages for the tests and the demo.

# apt_get ARGS...: apt-get through one lock, so that two pytest workers installing at once take turns
# (and wait for any other apt-get on the machine instead of failing on its lock).
apt_get() { flock /tmp/agora-apt.lock apt-get -o DPkg::Lock::Timeout=600 "$@"; }

# require_installer WHAT SCRIPT ARGS...: return if this process may install with apt-get; re-run
# SCRIPT under passwordless sudo if that is available; else say why (WHAT: what is missing) and exit 3.
require_installer() {
  local what="$1" script="$2"
  shift 2
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$what, and there is no apt-get to install it" >&2
    exit 3
  fi
  [ "$(id -u)" = 0 ] && return 0
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    exec sudo -n -E bash "$script" "$@"
  fi
  echo "$what; installing it needs root (or passwordless sudo)" >&2
  exit 3
}

# apt_install LOG PACKAGE...: install the packages (quietly, into LOG); when that fails, refresh the
# package lists and try once more; on a second failure show the end of LOG and return 1.
apt_install() {
  local log="$1"
  shift
  mkdir -p "$(dirname "$log")"
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1 && return 0
  apt_get update -qq >>"$log" 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1 && return 0
  tail -20 "$log" >&2
  return 1
}
