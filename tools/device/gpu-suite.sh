#!/bin/bash
# The GPU checks of a tree, in one device call of at most about 9 minutes, each
# step time-limited, in order of priority:
#   1. the GPU test suite (tools/run-tests --gpu; its log in $OUT/testlog-gpu.txt);
#   2. the Python package built with `pip install .` and python/tests_gpu
#      (PyTorch, RMM and CuPy adapters on the device);
#   3. compute-sanitizer's memcheck over sova_gpu_tests, with the time left.
#
#   OUT=DIR tools/device/gpu-suite.sh
#
# The lent machines have no network: carry PyTorch's and RMM's wheels and
# meson-python in .carry/torch-whl/ and .carry/rmm-whl/ (python_env.sh), and
# RMM's headers in .rmm/ (tools/fetch-rmm). TOTAL_S (default 560) bounds the call;
# python/tests_gpu takes about 200 s on the H100 (its graph cases compile with
# torch.compile and build the native backend once).
set -o pipefail
t0=$SECONDS
total=${TOTAL_S:-560}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source tools/device/python_env.sh
use_carried_wheels .carry/torch-whl .carry/rmm-whl
echo "=== gpu suite"
timeout 200 tools/run-tests --gpu 2>&1 | grep -vE "^\[[0-9]+/|Compiling|Linking" | tail -25
[ -n "${OUT:-}" ] && cp build/meson-logs/testlog-gpu.txt "$OUT/" 2>/dev/null
echo "=== python: pip install . and python/tests_gpu $((SECONDS - t0)) s"
pip_install_sova 90
(cd /tmp && timeout 280 python3 -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests_gpu" -rfE 2>&1 | tail -15)
echo "=== compute-sanitizer $((SECONDS - t0)) s"
left=$((total - (SECONDS - t0)))
if [ $left -gt 20 ]; then
  timeout $left compute-sanitizer --tool memcheck --report-api-errors no build/test/sova_gpu_tests 2>&1 | tail -4
fi
echo "=== done $((SECONDS - t0)) s"
