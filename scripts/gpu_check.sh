#!/usr/bin/env bash
# The GPU check: the CUDA path run for real on one CUDA GPU, every log and figure kept under docs/bench-gpu/
# (or $OUT_DIR). Steps, in order of priority:
#   conformance  the CUDA conformance tests (GPU = CPU for KV, actions and greedy text; CUDA graphs; lanes on
#                streams; the compiled prefill; loading onto CUDA);
#   pi05         the full pi05 preset with random weights in bfloat16: P (compiled and eager), A (CUDA graph
#                and eager), D(1), D(10), D(30), and the action_only, sequential and oxygen frames at N = 30,
#                k = 1 (oxygen also with the eager prefill), side by side in one process;
#   prefill_profile  the pi05 prefill, eager and compiled: wall, the GPU's busy time and kernel count, and the
#                floor of its matrix products;
#   fleet        oxygen-bench --robots 1,8 on the pi05 preset (one engine for 8 robots vs 8 processes);
#   bench_quick  oxygen-bench --quick on the bench preset (every mode).
# Usage: scripts/gpu_check.sh [--steps a,b,...] [--deadline SECONDS]
#   --steps     which steps to run (default: all, in the order above)
#   --deadline  wall-clock budget of the whole check (default 540): each step gets at most its own limit and
#               what is left; a step with under 30 s left is skipped and said so.
# Python: $PYTHON, else .venv/bin/python if its torch sees CUDA, else python3. No network access is needed.
# One command keeps every log: set -o pipefail; bash scripts/gpu_check.sh 2>&1 | tee gpu_check.out
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
steps="conformance,pi05,prefill_profile,fleet,bench_quick"
deadline=540
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --deadline) deadline="$2"; shift 2 ;;
    *) echo "gpu_check: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
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
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$((RANDOM % 100 + 1))}"
# One inductor cache for every step (the compiled prefill and chunk of a step reuse an earlier step's kernels).
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/oxygen_gpu_check_inductor}"
started=$SECONDS
status=0
log() { echo "$*" | tee -a "$out/gpu_check.log"; }
wanted() { [[ ",$steps," == *",$1,"* ]]; }
step() {  # step NAME LIMIT_S COMMAND...: run within the deadline, log, remember a failure, go on
  local name="$1" limit="$2"; shift 2
  wanted "$name" || return 0
  local left=$((deadline - (SECONDS - started)))
  if (( left < 30 )); then
    log "== $name: SKIPPED, ${left}s left of the ${deadline}s deadline"; status=1; return 0
  fi
  (( limit > left )) && limit=$left
  log "== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" > >(tee "$out/$name.log") 2>&1
  local rc=$?
  log "== $name: exit $rc after $((SECONDS - t0))s$([[ $rc == 124 ]] && echo ' (TIMED OUT)')"
  [[ $rc -eq 0 ]] || status=1
}
: > "$out/gpu_check.log"
log "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ): steps $steps, deadline ${deadline}s"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
  "$py" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '|', torch.cuda.get_device_name(), '|', torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
} 2>&1 | tee -a "$out/gpu_check.log"

# These tests use no DDS. As root, test/conftest.py re-runs pytest in a loopback-only network namespace; a
# GPU sandbox may not allow one (gVisor), and then pytest would never start: run them without it there.
if [[ "$(id -u)" == 0 ]] && ! unshare -n -- sh -c 'ip link set lo up' 2>/dev/null; then
  log "gpu_check: no network namespace here; the conformance tests (no DDS) run without one"
  export OXYGEN_IN_NETNS=1
fi
step conformance 180 "$py" -m pytest -q -p no:cacheprovider -rs test/test_cuda.py test/test_cuda_graphs.py \
  test/test_checkpoint.py -k "cuda or graph or bucket or fused_prefill"
step pi05 300 "$py" -m oxygen_ros.bench.cli --device cuda --preset pi05 --dtype bfloat16 \
  --modes action_only sequential oxygen --lengths 30 --tokens-per-frame 1 --frames 12 --eager-prefill \
  --kv-budget-mb 2048 --out "$out/pi05"
step prefill_profile 90 "$py" -m oxygen_ros.bench.probes.prefill_profile --preset pi05 --device cuda --dtype bfloat16
step fleet 240 "$py" -m oxygen_ros.bench.cli --device cuda --preset pi05 --dtype bfloat16 --robots 1,8 \
  --seconds 4 --repeats 1 --kv-budget-mb 4096 --out "$out/fleet"
step bench_quick 240 "$py" -m oxygen_ros.bench.cli --device cuda --quick --eager-prefill --out "$out/bench"
log "gpu_check: $([[ $status -eq 0 ]] && echo all steps passed || echo some steps FAILED or were skipped) in $((SECONDS - started))s; logs in $out"
exit $status
