#!/usr/bin/env bash
# The stand-in's entrypoint (see Dockerfile): `redis-server ARGS...` as user redis, on every address,
# protected mode off unless the arguments set it or name a config file; anything else runs as given.
set -euo pipefail
if [ "${1:-}" = redis-server ]; then
  shift
  case " $* " in
    *" --protected-mode "* | " "*.conf" "*) ;;
    *) set -- --protected-mode no "$@" ;;
  esac
  case " $* " in *" --bind "*) ;; *) set -- --bind "* -::*" "$@" ;; esac
  exec setpriv --reuid=redis --regid=redis --init-groups -- redis-server "$@"
fi
exec "$@"
