#!/usr/bin/env bash
# The README's test command: set-up (idempotent), then the whole test suite with DDS on loopback.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec bash scripts/in_netns.sh "$root/.venv/bin/python" -m pytest "$@"
