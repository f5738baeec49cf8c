#!/bin/bash
# Where each trace's replay spends its driver time on the GPU
# (bench/replay/driver_time.cpp): a release build of sova_driver_time, then
# every trace with the default remapping, the thorough effort on the traces
# that remap, and lstm_train without remapping. Output on stdout.
set -o pipefail
source bench/bench_lib.sh
build=${BUILD_DIR:-build-bench}
configure_bench "$build" -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null || exit 1
meson compile -C "$build" sova_driver_time 2>&1 | grep -E "error|FAILED"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T=bench/traces
for t in gpt_train resnet_train encoder_amp_train gpt_decode unet_train vit_train lstm_train; do
  timeout 60 "$build"/bench/sova_driver_time $T/$t.csv.gz ${DRIVER_TIME_ARGS:-}
done
for t in gpt_decode unet_train lstm_train; do
  timeout 120 "$build"/bench/sova_driver_time $T/$t.csv.gz --thorough ${DRIVER_TIME_ARGS:-}
done
timeout 60 "$build"/bench/sova_driver_time $T/lstm_train.csv.gz --no-remap ${DRIVER_TIME_ARGS:-}
