#!/usr/bin/env bash
# The PyTorch proof on a GPU machine, in one go (docs/benchmarks.md, "Remapping
# under PyTorch", records a run): pip install . (no build isolation: meson-python, meson,
# ninja and patchelf must be importable/on PATH), the no-GPU and GPU pytest
# suites, then bench/torch/train_compare.py.
#   bench/torch/run_proof.sh OUTDIR [train_compare args...]
# Each stage is time-limited (SOVA_PROOF_TEST_S, default 240 s, for the tests);
# pytest's whole output goes to OUTDIR/pytest.log.
set -uo pipefail
out=${1:?usage: run_proof.sh OUTDIR [train_compare args]}; shift
mkdir -p "$out"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
status=0
echo "=== install"
t0=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=/tmp/sova-pip-build . 2>&1 | tail -20 || exit 1
echo "install: $(( $(date +%s) - t0 )) s"
python3 -c 'import torch, sova; print("torch", torch.__version__, "sova", sova.__version__, torch.cuda.get_device_name(0))'
echo "=== pytest python/tests (no GPU needed) + python/tests_gpu"
cd /tmp || exit 1
timeout "${SOVA_PROOF_TEST_S:-240}" python3 -m pytest -v -p no:cacheprovider "$repo/python/tests" "$repo/python/tests_gpu" \
  >"$out/pytest.log" 2>&1 || status=1
grep -E "(PASSED|FAILED|ERROR)( |$)|^E  |passed|failed" "$out/pytest.log" | tail -60
cd "$repo" || exit 1
echo "=== train_compare"
python3 bench/torch/train_compare.py --out "$out" "$@" || status=1
exit $status
