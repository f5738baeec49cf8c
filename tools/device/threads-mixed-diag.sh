#!/bin/bash
set -o pipefail
meson setup build-diag -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null 2>&1 || meson setup build-diag -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true 2>&1 | tail -5
meson compile -C build-diag bench/sova_bench 2>&1 | tail -2
B=build-diag/bench/sova_bench
timeout 120 $B --benchmark_filter='^(threads_mixed)/(sova_pool|sova_pool_unchecked|sova_capi)/' --benchmark_min_time=0.2s 2>&1 | grep -E "threads_mixed" | tee $OUT/diag.txt
timeout 60 $B --benchmark_filter='^threads_mixed/sova_pool/classes:64/real_time/threads:1$' --benchmark_min_time=0.2s 2>&1 | grep threads_mixed | tee -a $OUT/diag.txt
