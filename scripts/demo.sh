#!/usr/bin/env bash
# The README's main job: set-up (idempotent), then the end-to-end demo on the built-in tiny model,
# with DDS confined to this machine (a loopback-only network namespace when run as root).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec bash scripts/in_netns.sh "$root/.venv/bin/python" -m oxygen_ros.demos "$@"
