#!/usr/bin/env bash
# Builds sova for release and runs the seed program and the benchmarks on a
# GPU machine, made for the lent H100; then, with $OUT set, plots them.
# Timed on the H100: 354 s with SOVA_TRACE_DIR pointing at an
# empty directory (no replay cases) and no .rmm/, build included; the RMM
# program adds about 2 minutes, the replay cases about 1. The lent machine
# takes at most 10 minutes a command: there, run the replay apart
# (SOVA_TRACE_DIR=<empty dir> bench/run_h100.sh, then bench/run_replay.sh).
# Each program has a timeout
# (sova_seed 60 s, sova_bench 330 s, sova_bench_torch 75 s per mode,
# sova_bench_rmm 200 s) in case one hangs.
#
#   bench/run_h100.sh [SOVA_BENCH_ARGS...]     e.g. --benchmark_filter=multistream/
#
# BUILD_DIR (default build-bench) is configured with -Dbuildtype=release
# -Dgpu=enabled (so a missing nvcc fails here, not silently) -Dtests=false.
# PyTorch: if $TORCH_VENV (default /opt/torch/.venv) has bin/python3, that bin/
# goes first on PATH, so meson's python3 finds torch and sova_bench_torch is
# built (bench/torch/meson.build), and the plots use that Python (matplotlib).
# sova_bench_torch runs twice, one PyTorch allocator mode per process:
# torch_caching (PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF unset), then
# torch_expandable (--expandable, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).
# RMM: if .rmm/ is there (tools/fetch-rmm; carried to the GPU machine), meson
# gets -Drmm_root=.rmm and sova_bench_rmm (bench/rmm/) is built and run after
# the torch runs (timeout 200 s), with sova_bench's repetitions, minimum time
# and arguments; without .rmm/, -Drmm_root= (empty) leaves it out.
#
# sova_bench runs every case but the *_sim ones (host timings, smoke tests),
# 3 repetitions, aggregates only, 0.2 s minimum time per repetition (the
# --benchmark_min_time form the installed Google Benchmark accepts: "0.2s" for
# 1.8, a plain "0.2" for 1.7). Arguments go to sova_bench (and sova_bench_rmm).
#
# With $OUT set, at most 11 files land there:
#   seed.txt        the seed table
#   bench.txt       console output of sova_bench, sova_bench_torch, sova_bench_rmm
#   bench.json      sova_bench, Google Benchmark JSON (aggregates of 3 repetitions)
#   torch.json      sova_bench_torch, torch_caching, the same (when it was built)
#   torch_expandable.json   sova_bench_torch --expandable, torch_expandable
#   rmm.json        sova_bench_rmm, the same (when it was built)
#   summary.md      tables per workload and the targets (tools/plot_bench.py)
#   ratios.png, threads.png, overheads.png   the figures (tools/plot_bench.py),
#   traces.png      and the replay/ cases' when bench/traces/ has traces
# Exit status: non-zero if the build, sova_seed (e.g. a wrong kernel result),
# sova_bench, sova_bench_rmm or either sova_bench_torch run failed (including a torch run whose
# JSON context does not read back the expandable_segments it was run with);
# each program runs even when an earlier one failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
start_s=$SECONDS

# shellcheck source=bench/bench_lib.sh
. bench/bench_lib.sh
use_torch_venv

build=${BUILD_DIR:-build-bench}
options=(-Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true)
rmm_root=
[ -d .rmm ] && rmm_root=.rmm
options+=(-Drmm_root=$rmm_root)
configure_bench "$build" "${options[@]}" || exit 1
targets=(bench/sova_seed bench/sova_bench)
torch_bin=
if has_target "$build" sova_bench_torch; then
  targets+=(bench/torch/sova_bench_torch)
  torch_bin=$build/bench/torch/sova_bench_torch
fi
rmm_bin=
if has_target "$build" sova_bench_rmm; then
  targets+=(bench/rmm/sova_bench_rmm)
  rmm_bin=$build/bench/rmm/sova_bench_rmm
fi
meson compile -C "$build" "${targets[@]}" || exit 1
echo "built in $((SECONDS - start_s)) s"

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && rm -f "$OUT/seed.txt" "$OUT/bench.txt" "$OUT/bench.json" "$OUT/torch.json" \
    "$OUT/torch_expandable.json" "$OUT/rmm.json"
fi

set_common_args "$build/bench/sova_bench"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
run seed.txt timeout 60 "$build/bench/sova_seed" || status=1

bench_args=(--benchmark_filter=-_sim "${common_args[@]}")
if [ -n "${OUT:-}" ]; then
  bench_args+=(--benchmark_out="$OUT/bench.json" --benchmark_out_format=json)
fi
run bench.txt timeout 330 "$build/bench/sova_bench" "${bench_args[@]}" "$@" || status=1

jsons=()
[ -n "${OUT:-}" ] && jsons+=("$OUT/bench.json")
if [ -n "$torch_bin" ]; then
  # One PyTorch allocator mode per process (bench/torch/torch_allocator.hpp):
  # torch_caching with PyTorch's settings variables unset, then torch_expandable
  # with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and --expandable. Each
  # process probes what the allocator really does and exits 1 if it is not its
  # mode; with $OUT, the setting is also read back from the JSON context.
  for mode in caching expandable; do
    torch_args=("${common_args[@]}")
    torch_env=(-u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF)
    json=torch.json
    want=false
    if [ "$mode" = expandable ]; then
      torch_args+=(--expandable)
      torch_env+=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
      json=torch_expandable.json
      want=true
    fi
    if [ -n "${OUT:-}" ]; then
      torch_args+=(--benchmark_out="$OUT/$json" --benchmark_out_format=json)
    fi
    run bench.txt timeout 75 env "${torch_env[@]}" "$torch_bin" "${torch_args[@]}" || status=1
    [ -n "${OUT:-}" ] && [ -s "$OUT/$json" ] && jsons+=("$OUT/$json")
    if [ -n "${OUT:-}" ]; then  # the setting read back: what the program's probe saw
      seen=$(sed -n 's/^ *"torch_expandable_segments": "\(.*\)",\{0,1\}$/\1/p' "$OUT/$json" 2>/dev/null)
      if [ "$seen" != "$want" ]; then
        echo "sova_bench_torch ($mode): torch_expandable_segments is '$seen' in $json, not '$want'" |
          tee -a "$OUT/bench.txt"
        status=1
      fi
    fi
  done
else
  echo "sova_bench_torch not built (meson found no usable PyTorch; see its configure messages)" |
    { if [ -n "${OUT:-}" ]; then tee -a "$OUT/bench.txt"; else cat; fi; }
fi

if [ -n "$rmm_bin" ]; then
  rmm_args=("${common_args[@]}")
  [ -n "${OUT:-}" ] && rmm_args+=(--benchmark_out="$OUT/rmm.json" --benchmark_out_format=json)
  run bench.txt timeout 200 "$rmm_bin" "${rmm_args[@]}" "$@" || status=1
  [ -n "${OUT:-}" ] && [ -s "$OUT/rmm.json" ] && jsons+=("$OUT/rmm.json")
fi

if [ -n "${OUT:-}" ]; then
  python3 tools/plot_bench.py --out "$OUT" "${jsons[@]}" || status=1
fi
echo "run_h100.sh: $((SECONDS - start_s)) s in all, exit status $status"
exit $status
