# shellcheck shell=bash
# Sourced by the device scripts that run time-limited steps in one call
# (graphs-bench.sh, multi-gpu.sh, sleep-wake.sh), from the repository root.
# The caller sets first:
#   t0=$SECONDS  total=<seconds for the whole call>  OUT=<dir>  steps="<names wanted>"
#   logs_outside_out="<names>"  (optional: steps whose log stays in /tmp, since
#                                a call brings back at most 8 files of $OUT)
# and gets:
#   wanted NAME                 whether NAME is in $steps
#   run_step NAME LIMIT_S CMD   runs the shell command CMD (exported functions
#                               included) within min(LIMIT_S, time left), its
#                               output to the terminal and NAME's log; records
#                               the outcome for the summary
#   finish                      prints the summary and exits: 0 when every step
#                               that ran passed and none was left out for time

summary=()
status=0
left() { echo $((total - (SECONDS - t0))); }
wanted() { [[ " $steps " == *" $1 "* ]]; }
run_step() {
  local name=$1 limit=$2 command=$3
  local budget
  budget=$(left)
  [ "$limit" -lt "$budget" ] && budget=$limit
  if [ "$budget" -lt 15 ]; then
    summary+=("$name: NOT RUN (no time left)")
    status=1
    return
  fi
  echo "=== $name (at $((SECONDS - t0)) s, limit $budget s)"
  local start=$SECONDS
  local log=$OUT/$name.log
  [[ " ${logs_outside_out:-} " == *" $name "* ]] && log=/tmp/$name-step.log
  timeout --kill-after=10 "$budget" bash -o pipefail -c "$command" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  if [ "$rc" = 0 ]; then
    summary+=("$name: passed (${took} s)")
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    summary+=("$name: TIMED OUT after ${took} s")
    status=1
  else
    summary+=("$name: FAILED (exit $rc, ${took} s; $log)")
    status=1
  fi
}
finish() {
  echo "=== summary ($((SECONDS - t0)) s)"
  printf '  %s\n' "${summary[@]}"
  sleep 1  # tee's last lines into the script's log
  exit $status
}
