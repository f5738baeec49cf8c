# shellcheck shell=bash
# Sourced by bench/run_h100.sh, bench/run_replay.sh, tools/device/ab-trees.sh and
# tools/device/perf-gate.sh (from the repository root): what they share to build the
# benchmark programs and to log their output.
#
#   use_torch_venv            puts $TORCH_VENV (default /opt/torch/.venv)'s bin/
#                             first on PATH when it has python3, so that meson
#                             finds PyTorch (sova_bench_torch) and the plots run
#                             with its matplotlib
#   configure_bench DIR OPT...   meson setup DIR (--reconfigure if configured) with OPT...
#   has_target DIR NAME       whether DIR's build defines target NAME
#   min_time_arg BENCH S      prints --benchmark_min_time=S (seconds) in the form
#                             BENCH's Google Benchmark accepts
#   set_common_args BENCH     sets common_args, the flags every program gets: 3
#                             repetitions, aggregates only, 0.2 s minimum time
#   run LOG COMMAND...        runs COMMAND, appending its output to $OUT/LOG when $OUT is set
#   build_ab_trees TARGET...  release builds of the TARGETs in build-ab/ of this tree and
#                             of ab-base/ (another tree, for tools/device/ab-trees.sh);
#                             prints only errors
# configure_bench returns non-zero on failure; the callers exit.

use_torch_venv() {
  local venv=${TORCH_VENV:-/opt/torch/.venv}
  if [ -x "$venv/bin/python3" ]; then
    export PATH="$venv/bin:$PATH"
  fi
}

configure_bench() {
  local dir=$1
  shift
  if [ -f "$dir/meson-private/coredata.dat" ]; then
    meson setup --reconfigure "$dir" "$@"
  else
    meson setup "$dir" "$@"
  fi
}

has_target() {
  meson introspect --targets "$1" | grep -q "\"name\": \"$2\""
}

min_time_arg() {
  # Google Benchmark 1.8 takes "0.2s" (and warns on a bare number); 1.7 only a bare number.
  if "$1" --benchmark_list_tests=true --benchmark_filter='^$' "--benchmark_min_time=${2}s" >/dev/null 2>&1; then
    echo "--benchmark_min_time=${2}s"
  else
    echo "--benchmark_min_time=$2"
  fi
}

set_common_args() {
  # shellcheck disable=SC2034  # read by the script that sourced this file
  common_args=(--benchmark_repetitions=3 --benchmark_report_aggregates_only=true "$(min_time_arg "$1" 0.2)")
}

run() {
  local log=$1
  shift
  if [ -n "${OUT:-}" ]; then
    "$@" 2>&1 | tee -a "$OUT/$log"
  else
    "$@"
  fi
}

build_ab_trees() {
  local tree
  for tree in . ab-base; do
    (cd "$tree" && configure_bench build-ab -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null &&
      meson compile -C build-ab "$@" 2>&1 | grep -E "error|FAILED")
  done
}
