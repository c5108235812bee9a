#!/usr/bin/env bash
# The test suite beside busy processes, as on a robot's computer that runs drivers, cameras and loggers beside
# the policy: one busy loop per core (OXYGEN_LOAD_PROCESSES, default the number of cores), each bounded in time
# and killed when the tests end. Arguments go to pytest (default: the whole suite). The tests see
# OXYGEN_UNDER_LOAD=1: the few that need an idle machine skip and say why.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
busy=()
tests=""
stop_load() {
  for pid in "${busy[@]}" $tests; do kill "$pid" 2>/dev/null || true; done
  for pid in "${busy[@]}" $tests; do wait "$pid" 2>/dev/null || true; done
}
trap stop_load EXIT
trap 'exit 143' INT TERM  # (the EXIT trap then stops the tests and the load)
n="${OXYGEN_LOAD_PROCESSES:-$(nproc)}"
limit_s="${OXYGEN_LOAD_LIMIT_S:-14400}"  # a busy loop ends by itself after this long, whatever happens to this shell
for _ in $(seq "$n"); do
  timeout "$limit_s" "$root/.venv/bin/python" -c "while True: pass" &
  busy+=("$!")
done
echo "[test_under_load] $n busy processes (pids ${busy[*]}) beside the tests"
export OXYGEN_UNDER_LOAD=1
# In the background, so that a signal reaches the traps at once (bash runs them only after a foreground child).
bash scripts/in_netns.sh "$root/.venv/bin/python" -m pytest "${@:-test}" &
tests=$!
status=0
wait "$tests" || status=$?
tests=""
exit "$status"
