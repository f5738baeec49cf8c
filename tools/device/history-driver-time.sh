#!/bin/bash
# Does a pool's history slow a replay? sova_driver_time on unet_train and
# lstm_train alone, then after the traces the replay benchmark runs before
# them on its one warm pool (--before, alphabetical as the suite's order),
# twice each, alternating.
set -o pipefail
source bench/bench_lib.sh
configure_bench build-bench -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null || exit 1
meson compile -C build-bench sova_driver_time 2>&1 | grep -E "error|FAILED"
T=bench/traces
B=build-bench/bench/sova_driver_time
before_unet=$T/encoder_amp_train.csv.gz,$T/gpt_decode.csv.gz,$T/gpt_train.csv.gz,$T/lstm_train.csv.gz,$T/resnet_train.csv.gz
before_lstm=$T/encoder_amp_train.csv.gz,$T/gpt_decode.csv.gz,$T/gpt_train.csv.gz
for round in 1 2; do
  for t in unet_train lstm_train; do
    eval before=\$before_${t%_train}
    echo "== $t alone"; timeout 60 $B $T/$t.csv.gz --passes=100 | grep -E "^replay|^slow|unmap|set_access"
    echo "== $t after others"; timeout 120 $B $T/$t.csv.gz --passes=100 --before=$before | grep -E "^replay|^slow|unmap|set_access"
  done
done
