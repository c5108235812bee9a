#!/usr/bin/env bash
# Run a command with DDS confined to loopback. As root, it also runs inside a fresh network
# namespace whose only interface is lo, so no packet can leave the machine even by mistake.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/ros_env.sh"
if [[ "$(id -u)" == "0" && -z "${OXYGEN_IN_NETNS:-}" ]] && command -v unshare >/dev/null; then
  export OXYGEN_IN_NETNS=1
  exec unshare -n -- sh -c 'ip link set lo up && exec "$@"' sh "$@"
fi
exec "$@"
