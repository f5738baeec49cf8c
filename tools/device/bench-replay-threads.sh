#!/bin/bash
# The final benchmark run of 2026-11-23 (issue 12 figures): replay (sova, thorough,
# C API, cudaMallocAsync, PyTorch both modes), threads/threads_mixed/pair/random,
# the log's cost. Everything lands in $OUT/bench.tgz.
set -o pipefail
R=$OUT/r; mkdir -p $R
export SOVA_REPLAY_FILTER='^replay/[^/]+/(sova_pool|sova_capi|sova_thorough|cudaMallocAsync_default)/'
OUT=$R timeout 300 bench/run_replay.sh 2>&1 | grep -vE "^\[|Compiling|Linking" | tail -5
B=build-bench/bench
flags=(--benchmark_min_time=0.2s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true)
timeout 170 $B/sova_bench --benchmark_filter='^(threads_mixed|threads|pair|random)/(sova_pool|sova_pool_logged|sova_capi|sova_pool_unchecked|cudaMallocAsync_default)/' "${flags[@]}" \
  --benchmark_out=$R/micro.json --benchmark_out_format=json 2>&1 | grep -E "median" > $R/micro.txt
timeout 60 env -u PYTORCH_CUDA_ALLOC_CONF $B/torch/sova_bench_torch --benchmark_filter='^(threads_mixed|pair)/' "${flags[@]}" \
  --benchmark_out=$R/micro_torch.json --benchmark_out_format=json 2>&1 | grep -E "median" >> $R/micro.txt
grep -E "threads_mixed/.*(16|64)/real_time/threads:(1|16)_|^random/" $R/micro.txt | awk '{print $1, $2, $3, $NF, $(NF-1)}' | head -60
tar czf $OUT/bench.tgz -C $R . && rm -rf $R
