#!/bin/bash
# CUDA graph benchmarks on one GPU (docs/graphs.md, docs/python.md "CUDA
# graphs"), in one device call of under 6 minutes, each step time-limited:
#   build    a release build of bench/sova_graph_bench (meson -Dgpu=enabled)
#   graph    sova_graph_bench: the seed loop captured once and launched N
#            times, sova against cudaMallocAsync's graph memory nodes and a
#            preallocated buffer; with 1 buffer (the seed's 4 MiB live), then 3;
#            then three 1 GiB allocations in one graph whose lifetimes do not
#            overlap (warp#1157), and 16 graphs captured on one stream, all alive
#   torch    the Python package (pip install .), then
#            bench/torch/reduce_overhead.py: torch.compile reduce-overhead
#            (training step, inference at 3 batch sizes) and torch.cuda.graph
#            under PyTorch's allocator, sova.torch native and pluggable; the
#            first sova-native process builds the native backend where
#            TORCH_EXTENSIONS_DIR holds none (its enable_s: the first-use cost)
#   train    bench/torch/train_compare.py (eager training, GPT and ResNet-18,
#            TRAIN_SCALE x its steps, default 0.5; TRAIN_MODELS to choose) under PyTorch's allocator,
#            expandable segments, sova.torch pluggable and native
#
#   OUT=DIR tools/device/graphs-bench.sh          every step
#   STEPS="build graph" tools/device/graphs-bench.sh
#
# Carry .carry/torch-whl (meson-python). Logs: $OUT/graphs-bench.log
# (everything, and a closing summary), one log per step, $OUT/graph_bench_*.json,
# $OUT/reduce_overhead.json and $OUT/train_compare.tgz (its JSON and plot: a
# call brings back at most 8 files). TOTAL_S (default 345) bounds the call.
# Exit status 0 when every step passed.
set -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
t0=$SECONDS
total=${TOTAL_S:-345}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" || { echo "graphs-bench.sh: cannot create OUT=$OUT" >&2; exit 1; }
steps=${STEPS:-build graph torch train}
builddir=${BUILDDIR:-build-graphs}
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/graphs-bench.log") 2>&1

source tools/device/steps.sh

echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($(git status --short 2>/dev/null | wc -l) paths changed)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader

build() {
  env=$(tools/ensure-build-deps --print-env) && eval "$env" || return 1
  local reconf=()
  [ -d "$builddir/meson-info" ] && reconf=(--reconfigure)
  meson setup "${reconf[@]}" "$builddir" -Dgpu=enabled -Dbenchmarks=true -Dtests=false -Dbuildtype=release \
    >/tmp/graphs-setup.log 2>&1 || { tail -30 /tmp/graphs-setup.log; return 1; }
  ninja -C "$builddir" bench/sova_graph_bench | { grep -vE '^\[[0-9]+/' || true; }
}
export builddir
export -f build

if wanted build; then
  run_step build 150 build
  if [[ ${summary[-1]} != *passed* ]]; then
    echo "graphs-bench.sh: the build failed; the torch step runs without it" >&2
    steps=${steps/graph/}
  fi
fi

if wanted graph; then
  run_step graph 100 "
    $builddir/bench/sova_graph_bench --buffers 1 --json $OUT/graph_bench_1.json || exit 1
    $builddir/bench/sova_graph_bench --buffers 3 --json $OUT/graph_bench_3.json || exit 1
    $builddir/bench/sova_graph_bench --buffers 1 --buffer-mib 1024 --iterations 3 --launches 20 --rounds 3 \
      --json $OUT/graph_bench_3x1gib.json || exit 1
    $builddir/bench/sova_graph_bench --graphs 16 --buffers 2 --buffer-mib 64 --iterations 4 --launches 20 \
      --json $OUT/graph_bench_16graphs.json"
fi

if wanted torch || wanted train; then
  source tools/device/python_env.sh
  use_carried_wheels .carry/torch-whl
  pip_install_sova 120
fi

if wanted torch; then
  budget=$(( $(left) - 20 ))
  wanted train && budget=$(( budget - 150 ))
  [ "$budget" -gt 220 ] && budget=220
  run_step torch $((budget + 15)) \
    "python3 bench/torch/reduce_overhead.py --budget $budget --json $OUT/reduce_overhead.json"
fi

if wanted train; then
  run_step train 200 "python3 bench/torch/train_compare.py --out /tmp/train_compare --scale ${TRAIN_SCALE:-0.5} \
    --models ${TRAIN_MODELS:-gpt,resnet} --allocators native,expandable,sova,sova_native;
    rc=\$?; tar czf $OUT/train_compare.tgz -C /tmp train_compare; exit \$rc"
fi
finish
