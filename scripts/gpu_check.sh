#!/usr/bin/env bash
# The GPU check, about 12 minutes on one CUDA GPU. Writes everything under docs/bench-gpu/ (or $OUT_DIR):
#   1. conformance tests on CUDA (GPU = CPU for KV, actions and greedy text; CUDA graphs; lanes on streams);
#   2. oxygen-bench --device cuda --quick (the bench preset, CUDA graphs for the chunk and the decode steps,
#      the compiled prefill beside the eager one, and the frames with the eager prefill in the same run);
#   3. the full pi05 preset with random weights, bfloat16: P (compiled and eager), A, D(1), D(10), D(30) and
#      the oxygen vs action_only frames at N = 30, k = 1.
# Python: $PYTHON, else .venv/bin/python if its torch sees CUDA, else python3. No network access is needed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT_DIR:-docs/bench-gpu}"
py="${PYTHON:-}"
cuda_ok() { "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
if [[ -z "$py" ]]; then
  if [[ -x .venv/bin/python ]] && cuda_ok .venv/bin/python; then py=.venv/bin/python; else py=python3; fi
fi
if ! cuda_ok "$py"; then
  echo "gpu_check: $py has no CUDA-enabled torch or no GPU is visible; nothing to do" >&2
  exit 2
fi
mkdir -p "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
status=0
step() {  # step NAME TIMEOUT_S COMMAND...: run, log, remember a failure, go on
  local name="$1" limit="$2"; shift 2
  echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" | tee -a "$out/gpu_check.log"
  timeout "$limit" "$@" 2>&1 | tee -a "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$out/gpu_check.log"
  [[ $rc -eq 0 ]] || status=1
}
: > "$out/gpu_check.log"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
} | tee -a "$out/gpu_check.log"

# These tests use no DDS. As root, test/conftest.py re-runs pytest in a loopback-only network namespace; a
# GPU sandbox may not allow one (gVisor), and then pytest would never start: run them without it there.
if [[ "$(id -u)" == 0 ]] && ! unshare -n -- sh -c 'ip link set lo up' 2>/dev/null; then
  echo "gpu_check: no network namespace here; the conformance tests (no DDS) run without one" | tee -a "$out/gpu_check.log"
  export OXYGEN_IN_NETNS=1
fi
step conformance 150 "$py" -m pytest -q -p no:cacheprovider test/test_cuda.py test/test_cuda_graphs.py \
  test/test_checkpoint.py -k "cuda or graph or bucket or fused_prefill"
step bench_quick 300 "$py" -m oxygen_ros.bench.cli --device cuda --quick --eager-prefill --out "$out/bench"
step pi05 420 "$py" -m oxygen_ros.bench.cli --device cuda --preset pi05 --dtype bfloat16 --modes action_only oxygen \
  --lengths 30 --tokens-per-frame 1 --frames 6 --kv-budget-mb 2048 --out "$out/pi05"
echo "gpu_check: $([[ $status -eq 0 ]] && echo all steps passed || echo some steps FAILED); logs in $out" \
  | tee -a "$out/gpu_check.log"
exit $status
