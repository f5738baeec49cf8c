#!/bin/bash
# What remapping does in PyTorch training: bench/torch/train_compare.py's
# ResNet-18 and GPT (their batch and sequence lengths vary per step) under
# sova.torch with and without remap="balanced", each run's sova counters
# printed, and the allocation log of each remapping run (SOVA_LOG) left in
# $OUT as a trace for the simulation. Carry .carry/torch-whl.
set -o pipefail
t0=$SECONDS
source tools/device/python_env.sh
use_carried_wheels .carry/torch-whl
pip_install_sova 150
echo "=== installed $((SECONDS - t0)) s"
steps=${STEPS:-100}
for model in ${MODELS:-resnet gpt}; do
  for alloc in sova sova_remap; do
    log=
    [ $alloc = sova_remap ] && log=$OUT/$model-remap-log.csv
    SOVA_LOG=$log timeout 150 python3 bench/torch/train_compare.py --worker $model $alloc $steps $OUT/$model-$alloc.json ||
      echo "$model $alloc failed"
    python3 - "$OUT/$model-$alloc.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("sova_stats", {})
keys = ("allocations", "fastPathHits", "slowFromHeap", "slowGrown", "slowWithWait", "chunksMapped",
        "chunksUnmapped", "chunksRemapped", "remapsToGhosts", "remapWaits", "deviceSynchronizes")
print(f"{r['model']} {r['allocator']}: {r['ms_per_step']:.2f} ms/step, peak reserved {r['peak_reserved'] / 2**30:.3f} GiB;",
      ", ".join(f"{k} {s[k]}" for k in keys if k in s))
print("  all counters:", {k: v for k, v in s.items() if isinstance(v, (int, float)) and v})
EOF
  done
  [ -f $OUT/$model-remap-log.csv ] && gzip -f $OUT/$model-remap-log.csv
  echo "=== $model done $((SECONDS - t0)) s"
done
