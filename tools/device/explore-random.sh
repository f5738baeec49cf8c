set -o pipefail
source bench/bench_lib.sh
configure_bench build-bench -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null || exit 1
meson compile -C build-bench sova_bench sova_driver_time 2>&1 | grep -E "error|FAILED"
for i in 1 2; do
build-bench/bench/sova_bench --benchmark_filter='^random/(sova_pool|cudaMallocAsync_default)/max_mib:(4|64|256)/' --benchmark_min_time=0.1 2>&1 | grep -E "^random" | awk '{printf "%s %s %s", $1, $2, $3; for (i=4;i<=NF;i++) if ($i ~ /^(moves|creates|waits|res_over_req)=/) printf " %s", $i; print ""}'
done
for t in unet_train lstm_train vit_train encoder_amp_train; do build-bench/bench/sova_driver_time bench/traces/$t.csv.gz --passes=100 | grep -E "^replay|^slow|unmap|set_access|^map"; done
