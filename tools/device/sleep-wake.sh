#!/bin/bash
# Sleep and wake on one GPU (docs/sleep-wake.md), in one device call of under
# 8 minutes, each step time-limited, in order of priority:
#   build    a release build: sova_sleep_wake and sova_gpu_tests
#   test     the gpu suite's sleep tests but the inflight one (which has its
#            own step), then the same under compute-sanitizer's memcheck if it is there
#            (memory errors only: the tests provoke API errors on purpose, a wake
#            refused for want of device memory)
#   bench    sova_sleep_wake: 1, 8 and 32 GiB, backup and discard, against a
#            plain pinned cudaMemcpyAsync of the same bytes in the same run
#   first    sova_sleep_wake --first-sleep: FIRST_SIZES (1,8) GiB, the first
#            sleep of a pool without and with pin-ahead, each against the
#            warm sleep of the same pool in the same run (not in the default steps)
#   drift    sova_sleep_wake --drift-cycles: DRIFT_CYCLES (1000) cycles of one
#            DRIFT_GIB (1) GiB pool, the device's free memory, the host memory
#            kept, the process's resident memory and the pool's reserved bytes
#            compared at cycle 1 and the last, every byte checked; fails on drift
#   inflight the gpu test where kernels on other streams write other memory
#            (another pool, cudaMalloc) while a pool sleeps and wakes, then
#            under compute-sanitizer's memcheck, its error summary printed
#   torch    the Python package (pip install .), then bench/torch/sleep_wake_rl.py:
#            a pinned copy, torch_memory_saver's pause/resume with CPU backup
#            (its wheel carried in .carry/tms-whl), sova.torch's sleep/wake,
#            and the RL-style loop (train step, sleep, graph-captured decode, wake)
#
#   OUT=DIR tools/device/sleep-wake.sh          build test bench torch (the default)
#   STEPS="build bench" tools/device/sleep-wake.sh
#   STEPS="build drift inflight" tools/device/sleep-wake.sh
#   SIZES=1,8,32 CYCLES=3 TORCH_GIB="1 8"       the sizes measured
#
# Carry .carry/torch-whl (meson-python) and .carry/tms-whl (torch_memory_saver).
# Logs: $OUT/sleep-wake.log (everything, and a closing summary), one log per
# step, $OUT/sleep_wake.json (sova_sleep_wake, the drift records appended)
# and $OUT/torch.json.
# TOTAL_S (default 470) bounds the call. Exit status 0 when every step passed.
set -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
t0=$SECONDS
total=${TOTAL_S:-470}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" || { echo "sleep-wake.sh: cannot create OUT=$OUT" >&2; exit 1; }
steps=${STEPS:-build test bench torch}
builddir=${BUILDDIR:-build-sleep}
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/sleep-wake.log") 2>&1

source tools/device/steps.sh

echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($(git status --short 2>/dev/null | wc -l) paths changed)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
free -g | head -2

build() {
  env=$(tools/ensure-build-deps --print-env) && eval "$env" || return 1
  local reconf=()
  [ -d "$builddir/meson-info" ] && reconf=(--reconfigure)
  meson setup "${reconf[@]}" "$builddir" -Dgpu=enabled -Dbenchmarks=true -Dtests=true -Dbuildtype=release \
    >/tmp/sleep-setup.log 2>&1 || { tail -30 /tmp/sleep-setup.log; return 1; }
  ninja -C "$builddir" bench/sova_sleep_wake test/sova_gpu_tests | { grep -vE '^\[[0-9]+/' || true; }
}
export builddir
export -f build

if wanted build; then
  run_step build 240 build
  if [[ ${summary[-1]} != *passed* ]]; then
    echo "sleep-wake.sh: the build failed; nothing else can run" >&2
    finish
  fi
fi

if wanted test; then
  run_step test 150 "
    $builddir/test/sova_gpu_tests '[sleep]~[inflight]' --durations yes || exit 1
    if command -v compute-sanitizer >/dev/null; then
      SOVA_SLEEP_PROGRAMS=40 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        $builddir/test/sova_gpu_tests '[sleep]~[inflight]'
    else
      echo 'compute-sanitizer not found: memcheck not run'
    fi"
fi

if wanted bench; then
  run_step bench 200 "$builddir/bench/sova_sleep_wake --sizes ${SIZES:-1,8,32} --cycles ${CYCLES:-3} --json $OUT/sleep_wake.json"
fi

if wanted first; then
  run_step first 200 "$builddir/bench/sova_sleep_wake --first-sleep --sizes ${FIRST_SIZES:-1,8} --json $OUT/sleep_wake.json"
fi

if wanted drift; then
  run_step drift 150 "$builddir/bench/sova_sleep_wake --drift-cycles ${DRIFT_CYCLES:-1000} --size-gib ${DRIFT_GIB:-1} \
    --json $OUT/sleep_wake.json"
fi

if wanted inflight; then
  run_step inflight 120 "
    $builddir/test/sova_gpu_tests '[inflight]' --durations yes || exit 1
    if ! command -v compute-sanitizer >/dev/null; then
      echo 'compute-sanitizer not found: memcheck not run'
      exit 1
    fi
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 $builddir/test/sova_gpu_tests '[inflight]' \
      >/tmp/inflight-memcheck.log 2>&1
    rc=\$?
    tail -25 /tmp/inflight-memcheck.log
    grep -E 'ERROR SUMMARY' /tmp/inflight-memcheck.log || echo 'no ERROR SUMMARY line'
    exit \$rc"
fi

if wanted torch; then
  source tools/device/python_env.sh
  use_carried_wheels .carry/torch-whl .carry/tms-whl
  pip_install_sova 150
  run_step torch 200 "
    failed=0
    for impl in sova pinned tms; do
      python3 bench/torch/sleep_wake_rl.py --impl \$impl --gib ${TORCH_GIB:-1 8} --cycles 3 --json $OUT/torch.json ||
        { echo \"torch: --impl \$impl failed\"; failed=1; }
    done
    exit \$failed"
fi
finish
