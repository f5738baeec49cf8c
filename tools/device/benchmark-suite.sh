#!/bin/bash
# The benchmark suite behind docs/benchmarks/results/ (docs/benchmarks.md,
# "Results"), in one device call of about 6 minutes on the H100: the replay of
# every recorded trace (bench/run_replay.sh) for sova's default pool, its
# thorough remapping and its C API, cudaMallocAsync and PyTorch's two
# allocators; then pair/, threads/, threads_mixed/ and random/ for sova (checked,
# unchecked, logged, C API), cudaMallocAsync and PyTorch's caching allocator.
# 3 repetitions of 0.2 s each, medians reported.
#
#   OUT=DIR tools/device/benchmark-suite.sh
#
# $OUT/results/ then holds what docs/benchmarks/results/ holds; replace that
# folder with it: replay.json, replay_torch.json, replay_torch_expandable.json,
# replay_summary.md, replay_ratios.png, replay_traces.png, replay_memory.png,
# micro.json, micro_torch.json, micro_summary.md, micro_ratios.png,
# micro_threads.png, micro_overheads.png (tools/plot_bench.py's --prefix keeps
# the two sets' names apart, and each summary embeds its own figures).
# Console output goes to $OUT/console.txt as well as stdout.
set -o pipefail
: "${OUT:?set OUT to the directory for the results}"
R=$OUT/results
W=$OUT/work
mkdir -p "$R" "$W"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/console.txt"
export SOVA_REPLAY_FILTER='^replay/[^/]+/(sova_pool|sova_capi|sova_thorough|cudaMallocAsync_default)/'
OUT=$W timeout 300 bench/run_replay.sh 2>&1 | grep -vE "^\[|Compiling|Linking" | tee -a "$OUT/console.txt" | tail -5
for f in replay.json replay_torch.json replay_torch_expandable.json replay_summary.md replay_ratios.png \
  replay_traces.png replay_memory.png; do
  [ -f "$W/$f" ] && mv "$W/$f" "$R/$f"
done
B=build-bench/bench
flags=(--benchmark_min_time=0.2s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true)
timeout 170 $B/sova_bench \
  --benchmark_filter='^(threads_mixed|threads|pair|random)/(sova_pool|sova_pool_logged|sova_capi|sova_pool_unchecked|cudaMallocAsync_default)/' \
  "${flags[@]}" --benchmark_out="$R/micro.json" --benchmark_out_format=json 2>&1 | grep -E "median" > "$W/micro.txt"
if [ -x $B/torch/sova_bench_torch ]; then
  timeout 60 env -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF $B/torch/sova_bench_torch \
    --benchmark_filter='^(threads_mixed|pair)/' "${flags[@]}" \
    --benchmark_out="$R/micro_torch.json" --benchmark_out_format=json 2>&1 | grep -E "median" >> "$W/micro.txt"
fi
tee -a "$OUT/console.txt" < "$W/micro.txt" |
  grep -E "threads_mixed/.*(16|64)/real_time/threads:(1|16)_|^random/" | awk '{print $1, $2, $3, $NF, $(NF-1)}' | head -60
micro=("$R/micro.json")
[ -f "$R/micro_torch.json" ] && micro+=("$R/micro_torch.json")
python3 tools/plot_bench.py --out "$R" --prefix micro "${micro[@]}" | tail -1
rm -rf "$W"
ls "$R"
