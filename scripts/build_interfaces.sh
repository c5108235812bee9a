#!/usr/bin/env bash
# Build the interface packages with cmake and install them into a virtual environment that has the ROS 2
# Kilted wheels of requirements-ros.txt: oxygen_ros_msgs (interfaces/oxygen_ros_msgs, sources in msg/ and
# action/) and interbotix_xs_msgs (interfaces/interbotix_xs_msgs: the Interbotix arm driver's command
# messages, for the ALOHA's joint_group / joint_single outputs). Afterwards `from oxygen_ros_msgs.msg import
# ActionChunk` and `from interbotix_xs_msgs.msg import JointGroupCommand` work in that venv's Python with no
# extra environment variables.
#
# Usage: scripts/build_interfaces.sh [--fix-only] VENV
#   --fix-only  only repair the wheels' cmake export files (needed once before any cmake or colcon
#               build against the PyPI wheels), build nothing.
#
# Idempotent: every run configures in a fresh temporary build folder and re-installs over the
# previous install. Works as root or as a normal user, with or without HOME.
set -euo pipefail

log() { echo "[build_interfaces] $*"; }
die() { echo "[build_interfaces] error: $*" >&2; exit 1; }

fix_only=0
if [[ "${1:-}" == "--fix-only" ]]; then
  fix_only=1
  shift
fi
[[ $# -eq 1 ]] || die "usage: $0 [--fix-only] VENV"
[[ -d "$1" ]] || die "virtual environment '$1' does not exist"
venv="$(cd "$1" && pwd)"
py="$venv/bin/python"
[[ -x "$py" ]] || die "'$py' is not an executable Python; is '$venv' a virtual environment?"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# name and the import that proves it installed
packages=(oxygen_ros_msgs interbotix_xs_msgs)
declare -A checks=(
  [oxygen_ros_msgs]="from oxygen_ros_msgs.msg import ActionChunk, TextDelta; from oxygen_ros_msgs.action import Ask; ActionChunk(); TextDelta(); Ask.Goal()"
  [interbotix_xs_msgs]="from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand; JointGroupCommand(name='arm', cmd=[0.0]); JointSingleCommand(name='gripper', cmd=0.0)"
)
for package in "${packages[@]}"; do
  [[ -f "$root/interfaces/$package/CMakeLists.txt" ]] || die "interface package not found at $root/interfaces/$package"
done
command -v cmake >/dev/null || die "cmake is not installed (apt-get install cmake g++)"

# The ROS wheels' Python re-executes itself (ros_wheels_bootstrapper); rclpy-related code wants a
# HOME or ROS_LOG_DIR that exists, and none of this may depend on the caller's account.
tmp_root="${TMPDIR:-/tmp}"
export HOME="${HOME:-$tmp_root}"
export ROS_LOG_DIR="${ROS_LOG_DIR:-$tmp_root/oxygen_ros_log}"
mkdir -p "$ROS_LOG_DIR" 2>/dev/null || true

[[ -d "$venv/share/ament_cmake/cmake" ]] \
  || die "ament_cmake is not installed in $venv; run: $py -m pip install -r $root/requirements-ros.txt"

# The wheels were built in a container whose Python lived in /opt/python/cp311-cp311; their
# share/*/cmake/*Export*.cmake files still name its include folders, which do not exist here.
# Point them at this venv's Python and numpy include folders (safe to repeat).
log "fixing Python include paths in the wheels' cmake export files"
"$py" - "$venv" <<'PY'
import pathlib
import re
import sys
import sysconfig

import numpy

venv = pathlib.Path(sys.argv[1])
py_include = sysconfig.get_paths()["include"]
np_include = numpy.get_include()
# .../site-packages/numpy/_core/include (numpy 2) or .../numpy/core/include (numpy 1)
np_pattern = re.compile(r"/opt/python/[^;\"]*?/site-packages/numpy/(?:_core|core)/include")
py_pattern = re.compile(r"/opt/python/[^;\"/]+/include/python3\.\d+")
changed = 0
for path in sorted(venv.glob("share/*/cmake/*Export*.cmake")):
    text = path.read_text()
    if "/opt/python/" not in text:
        continue
    new = py_pattern.sub(py_include, np_pattern.sub(np_include, text))
    if new != text:
        path.write_text(new)
        changed += 1
print(f"[build_interfaces]   {changed} file(s) rewritten (python: {py_include}, numpy: {np_include})")
PY
[[ $fix_only -eq 1 ]] && exit 0

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
jobs="$(nproc 2>/dev/null || echo 2)"
builds=()
trap 'rm -rf "${builds[@]}"' EXIT

build_package() {
  local package="$1" src="$root/interfaces/$1" build
  build="$(mktemp -d "$tmp_root/${package}_build.XXXXXX")"
  builds+=("$build")
  log "configuring $package (build folder $build)"
  if ! AMENT_PREFIX_PATH="$venv" cmake -S "$src" -B "$build" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$venv" \
      -DCMAKE_PREFIX_PATH="$venv" \
      -DCMAKE_INSTALL_RPATH="$venv/lib" \
      -DPython3_EXECUTABLE="$py" \
      -DBUILD_TESTING=OFF >"$build/configure.log" 2>&1; then
    tail -n 40 "$build/configure.log" >&2
    die "$package: cmake configure failed (log above)"
  fi
  log "building $package"
  if ! cmake --build "$build" --parallel "$jobs" >"$build/build.log" 2>&1; then
    tail -n 40 "$build/build.log" >&2
    die "$package: build failed (log above)"
  fi
  log "installing $package into $venv"
  if ! cmake --install "$build" >"$build/install.log" 2>&1; then
    tail -n 40 "$build/install.log" >&2
    die "$package: install failed (log above)"
  fi
  log "checking the import of $package"
  "$py" -c "${checks[$package]}" || die "$package was installed but does not import in $py"
  log "done: $package installed into $venv"
}

for package in "${packages[@]}"; do
  build_package "$package"
done
