#!/bin/bash
# A/B on the GPU: random/sova_pool alone, and after threads_mixed/sova_pool in
# the same process (the suite's order), for an older tree in ab-base/ (git
# archive of the commit to compare) and this tree. Release builds.
set -o pipefail
build() { (cd "$1" && meson setup "$2" -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null 2>&1; meson compile -C "$2" bench/sova_bench 2>&1 | tail -1); }
build ab-base /tmp/ab-base-build & build . /tmp/ab-new-build & wait
for which in base new base new; do
  B=/tmp/ab-$which-build/bench/sova_bench
  echo "== $which: random alone"
  timeout 60 $B --benchmark_filter='^random/sova_pool/' --benchmark_min_time=0.1s 2>&1 | grep -E "^random" | awk '{print $1, $2, $3}'
  echo "== $which: after threads_mixed"
  timeout 100 $B --benchmark_filter='^(threads_mixed/sova_pool/|random/sova_pool/)' --benchmark_min_time=0.1s 2>&1 | grep -E "^random|threads:16 " | awk '{print $1, $2, $3}'
done
