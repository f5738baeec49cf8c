#!/usr/bin/env bash
# Runs the replay/ cases (recorded allocation traces, docs/benchmarks.md
# "Trace replay") on a GPU machine: sova_bench on sova's and CUDA's
# allocators, then sova_bench_torch once per PyTorch allocator mode, each
# writing memory over time; then, with $OUT set, plots them.
#
#   OUT=DIR bench/run_replay.sh [--trace_dir=DIR] [more flags for every program]
#
# Traces: bench/traces/ unless --trace_dir or $SOVA_TRACE_DIR says otherwise
# (record them with tools/traces/record_training.py). BUILD_DIR (default
# build-bench) is configured and built as bench/run_h100.sh does (release,
# -Dgpu=enabled, no tests; $TORCH_VENV's python first on PATH, so that
# sova_bench_torch is built). 3 repetitions, aggregates only, 0.2 s minimum
# time, as run_h100.sh; the *_sim cases are left out. $SOVA_REPLAY_FILTER, when
# set, replaces sova_bench's filter (which of sova's and CUDA's allocators).
#
# With $OUT set, at most 11 files land there: replay.txt (console output),
# replay.json, replay_torch.json, replay_torch_expandable.json (Google
# Benchmark JSON), replay_memory.csv, replay_memory_torch.csv,
# replay_memory_torch_expandable.csv (memory over time), and from
# tools/plot_bench.py --prefix replay: replay_summary.md, replay_ratios.png,
# replay_traces.png, replay_memory.png.
# Exit status: non-zero if the build or any program failed (each runs even
# when an earlier one failed).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
start_s=$SECONDS

# shellcheck source=bench/bench_lib.sh
. bench/bench_lib.sh
use_torch_venv

build=${BUILD_DIR:-build-bench}
configure_bench "$build" -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true || exit 1
targets=(bench/sova_bench)
torch_bin=
if has_target "$build" sova_bench_torch; then
  targets+=(bench/torch/sova_bench_torch)
  torch_bin=$build/bench/torch/sova_bench_torch
fi
meson compile -C "$build" "${targets[@]}" || exit 1
echo "built in $((SECONDS - start_s)) s"

# outputs NAME.json MEMORY.csv: sets out_args, one program's output flags (none without $OUT).
outputs() {
  out_args=()
  if [ -n "${OUT:-}" ]; then
    out_args=(--benchmark_out="$OUT/$1" --benchmark_out_format=json --replay_memory_out="$OUT/$2")
  fi
}
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && rm -f "$OUT"/replay.txt "$OUT"/replay*.json "$OUT"/replay_memory*.csv
fi

set_common_args "$build/bench/sova_bench"
sova_filter=${SOVA_REPLAY_FILTER:-'^replay/[^/]+/(sova_pool|sova_pool_unchecked|sova_pool_noremap|sova_thorough|sova_size_classes|sova_buddy|sova_best_fit|sova_capi|sova_capi_from_pool|sova_capi_unchecked|cudaMallocAsync_default)/'}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
outputs replay.json replay_memory.csv
run replay.txt timeout 400 "$build/bench/sova_bench" --benchmark_filter="$sova_filter" "${common_args[@]}" \
  "${out_args[@]}" "$@" || status=1
jsons=(replay.json) memories=(replay_memory.csv)
if [ -n "$torch_bin" ]; then
  # One PyTorch allocator mode per process (bench/torch/torch_allocator.hpp).
  outputs replay_torch.json replay_memory_torch.csv
  run replay.txt timeout 200 env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF "$torch_bin" \
    --benchmark_filter='^replay/' "${common_args[@]}" "${out_args[@]}" "$@" || status=1
  outputs replay_torch_expandable.json replay_memory_torch_expandable.csv
  run replay.txt timeout 200 env -u PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    "$torch_bin" --expandable --benchmark_filter='^replay/' "${common_args[@]}" "${out_args[@]}" "$@" || status=1
  jsons+=(replay_torch.json replay_torch_expandable.json)
  memories+=(replay_memory_torch.csv replay_memory_torch_expandable.csv)
else
  echo "sova_bench_torch not built (meson found no usable PyTorch)" |
    { if [ -n "${OUT:-}" ]; then tee -a "$OUT/replay.txt"; else cat; fi; }
fi

if [ -n "${OUT:-}" ]; then
  plot_args=()
  for m in "${memories[@]}"; do [ -s "$OUT/$m" ] && plot_args+=(--replay-memory "$OUT/$m"); done
  for j in "${jsons[@]}"; do [ -s "$OUT/$j" ] && plot_args+=("$OUT/$j"); done
  python3 tools/plot_bench.py --out "$OUT" --prefix replay "${plot_args[@]}" || status=1
fi
echo "run_replay.sh: $((SECONDS - start_s)) s in all, exit status $status"
exit $status
