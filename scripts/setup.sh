#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install everything pinned, then the
# extra environments the tests need beside it (scripts/extra_envs.py: openpi's client, ...), so that the tests,
# which run where no package index can be reached, never install anything.
# Idempotent: stamp files record the hash of the inputs, so a second run with nothing changed takes a second.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
py="${PYTHON:-python3}"

stamp="$venv/.oxygen_setup_stamp"
inputs_hash="$(cat requirements.txt requirements-ros.txt requirements-ray.txt setup.py setup.cfg package.xml \
  scripts/setup.sh scripts/build_interfaces.sh $(find msg action interfaces -type f 2>/dev/null | sort) \
  | sha256sum | cut -d' ' -f1)"
export HOME="${HOME:-$root}"

make_venv() {
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "[setup] creating virtual environment in $venv"
    "$py" -m venv "$venv"
  fi
  export ROS_LOG_DIR="${ROS_LOG_DIR:-$root/.venv/ros_log}"
  mkdir -p "$ROS_LOG_DIR"
  "$venv/bin/python" -m pip install -q --upgrade pip
  echo "[setup] installing pinned Python dependencies (torch==2.13.0 CPU build, transformers, ...)"
  "$venv/bin/python" -m pip install -q -r requirements.txt
  # torch.compile (the fused action chunk) builds C++ kernels: it needs g++ and this Python's headers.
  if ! command -v g++ >/dev/null || ! "$venv/bin/python" -c \
      'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
      echo "[setup] installing g++ and Python headers for torch.compile"
      apt-get install -y -qq g++ "python$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-dev" \
        >/dev/null 2>&1 || echo "[setup] could not install g++/python3-dev: the action chunk will run eager (one warning)"
    else
      echo "[setup] note: no g++ or Python headers: the action chunk will run eager (apt install g++ python3-dev)"
    fi
  fi
  # MuJoCo renders headless through EGL (MUJOCO_GL=egl) on Mesa's CPU renderer: the ALOHA simulator's cameras.
  if ! ldconfig -p 2>/dev/null | grep -q "libEGL.so.1" || ! ls /usr/lib/*/dri/swrast_dri.so >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
      echo "[setup] installing EGL and Mesa's software renderer for MuJoCo (libegl1 libegl-mesa0 libgl1-mesa-dri)"
      apt-get install -y -qq libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null 2>&1; } \
        || echo "[setup] could not install the EGL libraries: the ALOHA simulator cannot render (its tests skip)"
    else
      echo "[setup] note: no EGL / Mesa libraries: the ALOHA simulator cannot render (apt install libegl1 libegl-mesa0 libgl1-mesa-dri)"
    fi
  fi
  echo "[setup] installing the optional Ray extra (oxygen-sim eval --ray)"
  "$venv/bin/python" -m pip install -q -r requirements-ray.txt
  echo "[setup] installing ROS 2 Kilted wheels"
  "$venv/bin/python" -m pip install -q -r requirements-ros.txt
  echo "[setup] building the interface packages (oxygen_ros_msgs, interbotix_xs_msgs) into the venv"
  bash scripts/build_interfaces.sh "$venv"
  echo "[setup] installing oxygen_ros (editable)"
  log="$venv/oxygen_install.log"
  if ! "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation -e . >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  echo "$inputs_hash" > "$stamp"
  echo "[setup] done: $venv"
}

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$inputs_hash" ]]; then
  make_venv
fi
# One line either way; a failure is a warning here (the rest of the suite still runs) and each test that needs
# the missing environment skips with a reason that .ci/run does not allow.
"$venv/bin/python" scripts/extra_envs.py make || echo "[setup] WARNING: rerun bash scripts/setup.sh where PyPI can be reached"
