#!/usr/bin/env bash
# Builds sova for release and runs the seed program and the benchmarks on a
# GPU machine, made for the lent H100. Sized to stay well under 8 minutes
# there: about 50 GPU cases x 5 repetitions x ~0.7 s (Google Benchmark's
# default 0.5 s minimum time, plus its iteration-count search). Not yet timed
# on the H100; each program is capped (timeout 60 s and 330 s) in case one hangs.
#
#   bench/run_h100.sh [SOVA_BENCH_ARGS...]     e.g. --benchmark_filter=pair/
#
# BUILD_DIR (default build-bench) is configured with -Dbuildtype=release
# -Dgpu=enabled (so a missing nvcc fails here, not silently) -Dtests=false.
# With $OUT set, results also land there: seed.txt (the seed table),
# bench.txt (console) and bench.json (Google Benchmark JSON, aggregates of 5
# repetitions). *_sim cases are left out: host timings, for smoke tests only.
# Exit status: non-zero if the build, sova_seed (e.g. a wrong kernel result)
# or sova_bench failed; sova_bench runs even when sova_seed failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

build=${BUILD_DIR:-build-bench}
options=(-Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true)
if [ -f "$build/meson-private/coredata.dat" ]; then
  meson setup --reconfigure "$build" "${options[@]}" || exit 1
else
  meson setup "$build" "${options[@]}" || exit 1
fi
meson compile -C "$build" bench/sova_seed bench/sova_bench || exit 1

# run LOG COMMAND...: runs COMMAND, copying its output to $OUT/LOG when $OUT is set.
run() {
  local log=$1
  shift
  if [ -n "${OUT:-}" ]; then
    "$@" 2>&1 | tee "$OUT/$log"
  else
    "$@"
  fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
run seed.txt timeout 60 "$build/bench/sova_seed" || status=1

bench_args=(--benchmark_filter=-_sim --benchmark_repetitions=5 --benchmark_report_aggregates_only=true)
if [ -n "${OUT:-}" ]; then
  bench_args+=(--benchmark_out="$OUT/bench.json" --benchmark_out_format=json)
fi
run bench.txt timeout 330 "$build/bench/sova_bench" "${bench_args[@]}" "$@" || status=1
exit $status
