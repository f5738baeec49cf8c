#!/bin/bash
# A/B of sova_driver_time (bench/replay/driver_time.cpp) between this tree and
# an older one unpacked in ab-base/ (git archive COMMIT | tar -x -C ab-base,
# with this tree's bench/replay/driver_time.cpp, timed_driver.hpp and
# bench/meson.build copied in when it predates them): release builds of both,
# then each trace alternately on each, AB_ROUNDS times (default 2); AB_PIN
# prefixes each run (e.g. "taskset -c 3": the lent host's times swing 2x unpinned).
# Prints one line per run: tree, trace, replay time, ns per event, the slow
# path's heap and growth time a pass.
set -o pipefail
source bench/bench_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
build_ab_trees sova_driver_time
for round in $(seq ${AB_ROUNDS:-2}); do
  for t in ${AB_TRACES:-gpt_train resnet_train encoder_amp_train gpt_decode unet_train vit_train lstm_train}; do
    for tree in . ab-base; do
      timeout 60 ${AB_PIN:-} $tree/build-ab/bench/sova_driver_time bench/traces/$t.csv.gz --passes=${AB_PASSES:-30} ${AB_ARGS:-} |
        awk -v tree=$tree -v t=$t '/^replay/ {r=$2; e=$6} /^slow path/ {print tree, t, r " us", e, $0}' |
        sed -E 's/fast-path hits.*//'
    done
  done
done
