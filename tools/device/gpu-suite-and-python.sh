#!/bin/bash
# The session's last device call: the GPU suite on the merged tree, random sizes
# after the kept-bound fix, the PyTorch GPU tests, the Python RMM/CuPy tests,
# compute-sanitizer. Each step time-limited, in order of priority.
set -o pipefail
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source tools/device/python_env.sh
use_carried_wheels .carry/torch-whl .carry/rmm-whl
echo "=== gpu suite"
timeout 300 tools/run-tests --gpu 2>&1 | grep -vE "^\[[0-9]+/|Compiling|Linking" | tail -25
cp build/meson-logs/testlog-gpu.txt $OUT/ 2>/dev/null
echo "=== random (after the kept-bound fix) $((SECONDS - t0)) s"
timeout 40 build/bench/sova_bench --benchmark_filter='^random/(sova_pool|cudaMallocAsync_default)/' --benchmark_min_time=0.2s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep median | awk '{print $1, $2, $3, $NF, $(NF-1)}'
echo "=== python: pip install . and the PyTorch GPU tests $((SECONDS - t0)) s"
pip_install_sova 90
(cd /tmp && timeout 100 python3 -m pytest -q -p no:cacheprovider $OLDPWD/python/tests_gpu -rfE 2>&1 | tail -15)
echo "=== compute-sanitizer $((SECONDS - t0)) s"
left=$((515 - (SECONDS - t0))); [ $left -gt 20 ] && timeout $left compute-sanitizer --tool memcheck --report-api-errors no build/test/sova_gpu_tests 2>&1 | tail -4
echo "=== done $((SECONDS - t0)) s"
