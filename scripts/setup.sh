#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install everything pinned.
# Idempotent: a stamp file records the hash of the inputs, so a second run with nothing changed
# takes about a second.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
py="${PYTHON:-python3}"

stamp="$venv/.oxygen_setup_stamp"
inputs_hash="$(cat requirements.txt requirements-ros.txt setup.py setup.cfg package.xml \
  scripts/setup.sh scripts/build_interfaces.sh $(find msg action interfaces -type f 2>/dev/null | sort) \
  | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$inputs_hash" ]]; then
  exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "[setup] creating virtual environment in $venv"
  "$py" -m venv "$venv"
fi
export HOME="${HOME:-$root}"
export ROS_LOG_DIR="${ROS_LOG_DIR:-$root/.venv/ros_log}"
mkdir -p "$ROS_LOG_DIR"
"$venv/bin/python" -m pip install -q --upgrade pip
echo "[setup] installing pinned Python dependencies (torch==2.13.0 CPU build, transformers, ...)"
"$venv/bin/python" -m pip install -q -r requirements.txt
echo "[setup] installing ROS 2 Kilted wheels"
"$venv/bin/python" -m pip install -q -r requirements-ros.txt
echo "[setup] building the oxygen_ros_msgs interface package into the venv"
bash scripts/build_interfaces.sh "$venv"
echo "[setup] installing oxygen_ros (editable)"
log="$venv/oxygen_install.log"
if ! "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e . >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
echo "$inputs_hash" > "$stamp"
echo "[setup] done"
