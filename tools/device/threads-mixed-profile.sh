#!/bin/bash
# threads_mixed's 16-thread cases on the GPU under perf (when the machine has
# it), each case alone: where a miss's time goes when 16 threads share the
# heap. Release build with frame pointers in build-prof. Output in $OUT.
set -o pipefail
t0=$SECONDS
meson setup build-prof -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true \
  -Dcpp_args=-fno-omit-frame-pointer >/dev/null 2>&1 || meson setup --reconfigure build-prof 2>&1 | tail -3
meson compile -C build-prof bench/sova_bench 2>&1 | tail -1
B=build-prof/bench/sova_bench
show() { grep threads_mixed | awk '{printf "%s %s %s", $1, $2, $3; for (i = 4; i <= NF; i++) if ($i ~ /_per_pair=|^pairs=|^stream_states=|^active_streams=|^reserved_MiB=/) printf " %s", $i; print ""}'; }
echo "=== alone ($((SECONDS - t0)) s in)"
for c in 'classes:16/real_time/threads:1' 'classes:64/real_time/threads:1' 'classes:64/real_time/threads:4' 'classes:16/real_time/threads:16' 'classes:64/real_time/threads:16'; do
  for a in sova_pool sova_pool_unchecked; do
    timeout 30 $B --benchmark_filter="^threads_mixed/$a/$c\$" --benchmark_min_time=0.2s 2>&1 | show
  done
done | tee $OUT/alone.txt
echo "=== perf ($((SECONDS - t0)) s in): $(command -v perf || echo none)"
if command -v perf >/dev/null; then
  for a in sova_pool; do
    perf record -F 2000 -g -o /tmp/perf.data $B --benchmark_filter="^threads_mixed/$a/classes:64/real_time/threads:16\$" --benchmark_min_time=0.3s 2>&1 | show
    perf report -i /tmp/perf.data --no-children --percent-limit 1 --stdio -g none 2>/dev/null | grep "%" | head -40 | tee $OUT/perf_flat_$a.txt
    perf report -i /tmp/perf.data --children --percent-limit 3 --stdio -g caller,0.5,callee --no-demangle 2>/dev/null | head -400 > $OUT/perf_tree_$a.txt
  done
fi
echo "=== done $((SECONDS - t0)) s"
