#!/bin/bash
# The device A/B that a change to lib/ lands with (README.md, "Contributing"):
# this tree (B) against BASE (A), in one device call, ending with one table.
#
# Here, where git is, before the call. BASE is the tree main had when the
# session began; the caller names it (nothing records it for the script):
#   tools/device/perf-gate.sh --unpack BASE
# That is ab-trees.sh's `git archive BASE | (mkdir -p ab-base && tar -x -C ab-base)`
# plus the full commit in ab-base/.perf-gate-base. ab-base/ is untracked, so the
# call carries it (name it in carry where .git/info/exclude ignores it); delete
# it afterwards. The device has no git history: without ab-base/ the script
# refuses. Then on the GPU machine, from the repository root (timeout_s 600):
#   OUT=DIR tools/device/perf-gate.sh [BASE]
# BASE (or PERF_GATE_BASE) defaults to the commit ab-base/.perf-gate-base
# records; when given, it must be that commit or a prefix of it.
#
# Within TOTAL_S seconds (default 540; a device call may run 600), every step
# time-limited:
#   build   release builds (-Dbuildtype=release -Dgpu=enabled -Dtests=false
#           -Dbenchmarks=true) of sova_bench, sova_driver_time and sova_sleep_wake,
#           both trees at once: this tree in build-perf-gate/, the base from a
#           copy of ab-base/ under PERF_GATE_WORK (default /tmp/perf-gate) whose
#           bench/ is this tree's, so that both trees run the same benchmark
#           code and only the library differs. A program of it that does not
#           build against the base comes from the base's own bench/ instead,
#           built after, saying so (figures that program lacks then read n/a);
#           PERF_GATE_HARNESS=own takes all three from there. A build directory
#           is reused only for the same sources (a digest of them), else made
#           anew: git archive's file times are the commit's, too old for ninja
#           to see.
#   rounds  PERF_GATE_ROUNDS (default "AB AA BA BB AB AA BA BB"; A: base, B: this
#           tree): in a round each step runs on its two trees in turn, so the
#           first tree alternates between rounds; AB and BA give B/A, AA and BB
#           (one tree twice) the noise. A round starts only while the longest
#           round so far still fits in the time left.
# The steps of a round (A/B per figure; tools/perf_gate_table.py names them):
#   seed     sova_bench seed/sova/ at 1, 4 and 64 MiB, release threshold 0 and
#            UINT64_MAX, through the C API, and seed/preallocated/ (the floor, a
#            control: no allocator in it)
#   pair     pair/ at 4 KiB: sova_pool, sova_pool_unchecked, sova_capi,
#            sova_capi_unchecked (the stream checks on and off)
#   threads  threads_mixed/ at 16 threads, 16 and 64 sizes, pool and C API
#            (not pinned: 16 threads)
#   replay   every trace in bench/traces/ (PERF_GATE_TRACES: names), one
#            sova_driver_time run each: its first pass (a fresh pool) and
#            PERF_GATE_PASSES steady passes (default 30) after 5 warm ones
#   sleep    sova_sleep_wake --sizes PERF_GATE_SLEEP_GIB (default 8) --cycles 4
#            --no-copy: the first sleep (it pins the host memory), the later
#            cycles' sleep and wake (not pinned: pinning runs on several threads)
# PERF_GATE_STEPS (default "seed pair threads replay sleep") names the steps a
# round runs, for a call that has less time; the table has no rows for a step
# left out.
# Google Benchmark steps: PERF_GATE_REPS repetitions (default 5) of
# PERF_GATE_MIN_TIME seconds (default 0.1). PERF_GATE_PIN (default
# "taskset -c 2-5"; empty: none) prefixes the single-stream runs (seed, pair,
# replay): unpinned, the lent hosts' times swing up to 2x. PERF_GATE_FLOOR
# (default 0.01): the least band around 1 that a ratio must leave to be WORSE
# or better. PERF_GATE_HEAD names this tree in the table (default: git's short
# commit, "this tree" without git).
# PERF_GATE_HEAD_BUILD and PERF_GATE_BASE_BUILD, both set, name build
# directories to run instead of building (bench/ in each holds the programs);
# PERF_GATE_BASE_TREE replaces ab-base/.
#
# Writes to $OUT (default /tmp/perf-gate-out; a call brings back 8 files):
# perf-gate.log (everything printed), perf-gate-table.md (the table),
# perf-gate.json (every value and ratio by round) and perf-gate-raw.tar.gz
# (each run's output and the build logs). Prints one line per run, then the
# table, last. Exit status: 0 when every run succeeded and no figure is WORSE;
# 1 otherwise; 2 when it refuses (usage, no ab-base/, BASE not what it holds).
set -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
base_tree=${PERF_GATE_BASE_TREE:-ab-base}

refuse() {
  echo "perf-gate.sh: $*" >&2
  exit 2
}

unpack() {
  local commit
  command -v git >/dev/null || refuse "--unpack needs git (run it where the repository's history is)"
  commit=$(git rev-parse --verify --quiet "$1^{commit}") || refuse "--unpack: $1 is no commit here"
  [ -e "$base_tree" ] && refuse "$base_tree/ exists (it holds $(cat "$base_tree/.perf-gate-base" 2>/dev/null ||
    echo 'an unrecorded tree')): delete it first"
  if ! { mkdir -p "$base_tree" && git archive "$commit" | tar -x -C "$base_tree"; }; then
    refuse "--unpack: git archive $commit failed"
  fi
  echo "$commit" >"$base_tree/.perf-gate-base"
  echo "$base_tree/ holds $commit ($(du -sh "$base_tree" | cut -f1)); the device call carries it (untracked)."
  if git check-ignore -q "$base_tree" 2>/dev/null; then
    echo "git ignores $base_tree/ here: name it in the call's carry."
  fi
  echo "Delete it after the call."
}

case ${1:-} in
  -h|--help) sed -n '2,/^set -o pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  --unpack) [ $# = 2 ] || refuse "usage: $0 --unpack BASE"; unpack "$2"; exit 0 ;;
  -*) refuse "usage: $0 [BASE] | --unpack BASE | --help" ;;
esac
[ $# -le 1 ] || refuse "usage: $0 [BASE] | --unpack BASE | --help"

# ---- what is compared -----------------------------------------------------------
if [ ! -f "$base_tree/meson.build" ] || [ ! -d "$base_tree/lib" ]; then
  refuse "no base tree in $base_tree/: unpack it before the call, where git is:
  tools/device/perf-gate.sh --unpack BASE    (BASE: the tree main had when the session began)"
fi
base=${1:-${PERF_GATE_BASE:-}}
recorded=$(cat "$base_tree/.perf-gate-base" 2>/dev/null)
if [ -n "$base" ] && [ -n "$recorded" ] && [[ $recorded != "$base"* ]]; then
  refuse "$base_tree/ holds $recorded, not $base: unpack $base (--unpack), or name the commit it holds"
fi
base_label=${base:-${recorded:0:12}}
[ -n "$base_label" ] || refuse "$base_tree/ records no commit (.perf-gate-base): name BASE, the commit it holds"
head_label=${PERF_GATE_HEAD:-$(git rev-parse --short HEAD 2>/dev/null || echo "this tree")}
read -r -a rounds <<<"${PERF_GATE_ROUNDS:-AB AA BA BB AB AA BA BB}"
for kind in "${rounds[@]}"; do
  [[ $kind =~ ^[AB][AB]$ ]] || refuse "PERF_GATE_ROUNDS: $kind is none of AB BA AA BB"
done
read -r -a steps <<<"${PERF_GATE_STEPS:-seed pair threads replay sleep}"
for step in "${steps[@]}"; do
  [[ $step =~ ^(seed|pair|threads|replay|sleep)$ ]] || refuse "PERF_GATE_STEPS: $step is none of seed pair threads replay sleep"
done
# wanted_step STEP: the rounds run STEP.
wanted_step() { [[ " ${steps[*]} " == *" $1 "* ]]; }
harness=${PERF_GATE_HARNESS:-head}
[ "$harness" = head ] || [ "$harness" = own ] || refuse "PERF_GATE_HARNESS is head or own, not $harness"

t0=$SECONDS
total=${TOTAL_S:-540}
reserve=15  # the table and the archive of the raw outputs, after the last run
left() { echo $((total - (SECONDS - t0))); }
OUT=${OUT:-/tmp/perf-gate-out}
work=${PERF_GATE_WORK:-/tmp/perf-gate}
[[ $work == /* ]] || work=$PWD/$work
raw=$work/raw
mkdir -p "$OUT" || refuse "cannot create OUT=$OUT"
if ! { rm -rf "$raw" && mkdir -p "$raw"; }; then
  refuse "cannot create $raw"
fi
exec > >(tee "$OUT/perf-gate.log") 2>&1

# shellcheck source=bench/bench_lib.sh
source bench/bench_lib.sh

echo "perf gate: A = $base_label ($base_tree/), B = $head_label (this tree); TOTAL_S $total"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none here"

failures=()
fail() {
  failures+=("$*")
  echo "FAILED: $*"
}

# ---- build --------------------------------------------------------------------
targets=(bench/sova_bench bench/sova_driver_time bench/sova_sleep_wake)
head_build=$PWD/build-perf-gate

# The sources a build directory was made from: meson's and the library's,
# the benchmarks' (bench/traces/ aside: read at run time, not built).
sources_digest() {
  (cd "$1" && find meson.build meson_options.txt lib include bench subprojects -type f \
    ! -path 'bench/traces/*' -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 cat | cksum)
}

# build_tree SRC BUILD LOG TARGET...: configures BUILD (an absolute path; made
# anew unless it was made from the same sources) and builds what of the
# TARGETs builds (ninja -k 0); all output to LOG. Fails when one does not.
build_tree() {
  local src=$1 build=$2 log=$3 digest
  shift 3
  digest=$(sources_digest "$src")
  if [ "$(cat "$build/perf-gate-sources" 2>/dev/null)" != "$digest" ]; then
    rm -rf "$build"
  fi
  (cd "$src" && configure_bench "$build" -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true) \
    >"$log" 2>&1 || return 1
  echo "$digest" >"$build/perf-gate-sources"  # what every object in BUILD is made from
  ninja -C "$build" -k 0 "$@" >>"$log" 2>&1
}
export -f build_tree sources_digest configure_bench

# build_at_once LIMIT TARGETS SRC BUILD LOG [SRC BUILD LOG]...: the trees at
# once, each within LIMIT seconds, the TARGETS (one word, spaces between);
# prints the errors of each build that failed.
build_at_once() {
  local limit=$1 wanted pids=() logs=() i rc=0
  read -r -a wanted <<<"$2"
  shift 2
  if [ "$limit" -lt 10 ]; then
    echo "no time left to build"
    return 1
  fi
  while [ $# -ge 3 ]; do
    timeout --kill-after=10 "$limit" bash -c 'build_tree "$@"' _ "$1" "$2" "$3" "${wanted[@]}" &
    pids+=($!)
    logs+=("$3")
    shift 3
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[i]}"; then
      rc=1
      echo "--- $(basename "${logs[i]}"): failed"
      grep -E "error|FAILED|ERROR" "${logs[i]}" | head -20
    fi
  done
  return $rc
}

# built BUILD TARGET: TARGET is there and up to date in BUILD.
built() { ninja -C "$1" -n "$2" 2>/dev/null | grep -q "no work to do"; }

# copy_tree DEST HARNESS: the base's sources into DEST, with this tree's
# bench/ (head) or its own (own).
copy_tree() {
  rm -rf "$1" && mkdir -p "$1" &&
    (cd "$base_tree" && tar --exclude='./build*' -cf - .) | tar -x -C "$1" || return 1
  if [ "$2" = head ]; then
    rm -rf "$1/bench" && cp -a bench "$1/bench"
  fi
}

declare -A base_prog  # program -> the base's binary of it
own_programs=()       # the base's programs built from its own bench/ although this tree's was asked for
if [ -n "${PERF_GATE_HEAD_BUILD:-}" ] && [ -n "${PERF_GATE_BASE_BUILD:-}" ]; then
  head_bin=$PERF_GATE_HEAD_BUILD/bench
  for program in sova_bench sova_driver_time sova_sleep_wake; do
    base_prog[$program]=$PERF_GATE_BASE_BUILD/bench/$program
  done
  harness=prebuilt
  echo "=== build: none (PERF_GATE_HEAD_BUILD, PERF_GATE_BASE_BUILD)"
else
  env=$(tools/ensure-build-deps --print-env) && eval "$env"
  copy_tree "$work/base-src" "$harness" || refuse "cannot copy $base_tree/ to $work/base-src"
  start=$SECONDS
  build_limit=${PERF_GATE_BUILD_S:-300}
  [ "$build_limit" -gt $(($(left) - 90)) ] && build_limit=$(($(left) - 90))  # a round's time after it
  echo "=== build (both trees at once, limit $build_limit s)"
  build_at_once "$build_limit" "${targets[*]}" . "$head_build" "$raw/build-head.log" \
    "$work/base-src" "$work/build-base" "$raw/build-base.log"
  missing=()
  for target in "${targets[@]}"; do
    built "$head_build" "$target" || { echo "perf-gate.sh: this tree's $target did not build: no table"; exit 1; }
    if built "$work/build-base" "$target"; then
      base_prog[${target#bench/}]=$work/build-base/$target
    else
      missing+=("$target")
    fi
  done
  if [ ${#missing[@]} -gt 0 ] && [ "$harness" = head ]; then
    echo "=== build: ${missing[*]} of this tree's bench/ did not build against the base: the base's own bench/ for them"
    copy_tree "$work/base-own-src" own || refuse "cannot copy $base_tree/ to $work/base-own-src"
    build_at_once $((build_limit - (SECONDS - start))) "${missing[*]}" \
      "$work/base-own-src" "$work/build-base-own" "$raw/build-base-own.log"
    for target in "${missing[@]}"; do
      built "$work/build-base-own" "$target" || continue
      base_prog[${target#bench/}]=$work/build-base-own/$target
      own_programs+=("${target#bench/}")
    done
  fi
  for target in "${targets[@]}"; do
    [ -n "${base_prog[${target#bench/}]:-}" ] || { echo "perf-gate.sh: the base's $target did not build: no table"; exit 1; }
  done
  echo "built in $((SECONDS - start)) s"
  head_bin=$head_build/bench
fi
for program in sova_bench sova_driver_time sova_sleep_wake; do
  if [ ! -x "$head_bin/$program" ] || [ ! -x "${base_prog[$program]}" ]; then
    refuse "$program missing: $head_bin/$program or ${base_prog[$program]}"
  fi
done

# ---- runs ---------------------------------------------------------------------
read -r -a pin <<<"${PERF_GATE_PIN-taskset -c 2-5}"
if [ ${#pin[@]} -gt 0 ] && ! "${pin[@]}" true 2>/dev/null; then
  echo "'${pin[*]} true' fails here: runs unpinned"
  pin=()
fi
reps=${PERF_GATE_REPS:-5}
passes=${PERF_GATE_PASSES:-30}
sleep_gib=${PERF_GATE_SLEEP_GIB:-8}
if [ -n "${PERF_GATE_TRACES:-}" ]; then
  read -r -a traces <<<"$PERF_GATE_TRACES"
else
  traces=()
  for f in bench/traces/*.csv.gz; do
    [ -e "$f" ] && traces+=("$(basename "$f" .csv.gz)")
  done
fi
# prog TREE PROGRAM: the binary to run.
prog() { [ "$1" = base ] && echo "${base_prog[$2]}" || echo "$head_bin/$2"; }
min_time=$(min_time_arg "$head_bin/sova_bench" "${PERF_GATE_MIN_TIME:-0.1}")
# --no-copy where the program has it (a base's own bench/ may predate it);
# its usage, which --help prints, names it.
declare -A sleep_args
for tree in base head; do
  sleep_args[$tree]="--sizes $sleep_gib --cycles 4"
  usage=$("$(prog $tree sova_sleep_wake)" --help 2>&1)
  [[ $usage == *--no-copy* ]] && sleep_args[$tree]+=" --no-copy"
done

# run_one NAME LIMIT COMMAND...: COMMAND within min(LIMIT, the time left),
# stdout and stderr to $raw/NAME.txt; one line of what it took.
run_one() {
  local name=$1 limit=$2 budget rc start=$SECONDS
  shift 2
  budget=$(($(left) - reserve))
  [ "$limit" -lt "$budget" ] && budget=$limit
  if [ "$budget" -lt 5 ]; then
    fail "$name: not run (no time left)"
    return
  fi
  timeout --kill-after=5 "$budget" "$@" >"$raw/$name.txt" 2>&1
  rc=$?
  if [ $rc = 0 ]; then
    printf '  %-44s %4d s\n' "$name" $((SECONDS - start))
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    fail "$name: timed out after $((SECONDS - start)) s (limit $budget s)"
  else
    fail "$name: exit $rc after $((SECONDS - start)) s ($(tail -1 "$raw/$name.txt"))"
  fi
}

# The seed cases of a bench/ from before mib:N have no /mib: (they ran 4 MiB).
bench_filters=(
  '^seed/(sova/threshold_max:[01]|preallocated/threshold_max:0)(/mib:(1|4|64))?/manual_time$'
  '^pair/(sova_pool|sova_pool_unchecked|sova_capi|sova_capi_unchecked)/4096/real_time$'
  '^threads_mixed/(sova_pool|sova_capi)/classes:(16|64)/real_time/threads:16$'
)
bench_steps=(seed pair threads)
bench_limits=(120 60 90)

# run_round N AB|BA|AA|BB
run_round() {
  local n=$1 kind=$2 order=() slot tree i t name
  for i in 0 1; do
    [ "${kind:i:1}" = A ] && order+=(base) || order+=(head)
  done
  echo "=== round $n: ${order[0]} then ${order[1]} (at $((SECONDS - t0)) s)"
  for i in "${!bench_steps[@]}"; do
    wanted_step "${bench_steps[i]}" || continue
    for slot in 1 2; do
      tree=${order[slot - 1]}
      name=r$n-$slot-$tree-${bench_steps[i]}
      local prefix=("${pin[@]}")
      [ "${bench_steps[i]}" = threads ] && prefix=()
      run_one "$name" "${bench_limits[i]}" "${prefix[@]}" "$(prog "$tree" sova_bench)" \
        "--benchmark_filter=${bench_filters[i]}" "--benchmark_repetitions=$reps" "$min_time" \
        "--benchmark_out=$raw/$name.json" --benchmark_out_format=json
    done
  done
  wanted_step replay || traces=()
  for t in "${traces[@]}"; do
    for slot in 1 2; do
      tree=${order[slot - 1]}
      run_one "r$n-$slot-$tree-replay-$t" 60 "${pin[@]}" "$(prog "$tree" sova_driver_time)" \
        "bench/traces/$t.csv.gz" "--passes=$passes"
    done
  done
  wanted_step sleep || return 0
  for slot in 1 2; do
    tree=${order[slot - 1]}
    name=r$n-$slot-$tree-sleep
    local args
    read -r -a args <<<"${sleep_args[$tree]}"
    run_one "$name" 120 "$(prog "$tree" sova_sleep_wake)" "${args[@]}" --json "$raw/$name.jsonl"
  done
}

longest=0
ran=0
for i in "${!rounds[@]}"; do
  if [ $ran -gt 0 ] && [ "$(left)" -lt $((longest + reserve)) ]; then
    echo "=== rounds $((i + 1))-${#rounds[@]} left out: $(left) s left, the longest round took $longest s"
    break
  fi
  start=$SECONDS
  run_round $((i + 1)) "${rounds[i]}"
  ran=$((ran + 1))
  [ $((SECONDS - start)) -gt $longest ] && longest=$((SECONDS - start))
done

# ---- the table ----------------------------------------------------------------
tar -czf "$OUT/perf-gate-raw.tar.gz" -C "$work" raw || fail "archiving $raw"
case $harness in
  head) ran_bench="this tree's bench/${own_programs[*]:+ (its own for ${own_programs[*]})}" ;;
  own) ran_bench="its own bench/" ;;
  *) ran_bench="the programs in $PERF_GATE_BASE_BUILD" ;;
esac
echo "=== $ran rounds in $((SECONDS - t0)) s; the base ran $ran_bench; raw outputs: perf-gate-raw.tar.gz"
for f in "${failures[@]}"; do echo "failed: $f"; done
python3 tools/perf_gate_table.py "$raw" --base "$base_label" --head "$head_label" \
  --floor "${PERF_GATE_FLOOR:-0.01}" --json "$OUT/perf-gate.json" --markdown "$OUT/perf-gate-table.md"
table_rc=$?
sleep 1  # tee's last lines into the log
[ $table_rc = 0 ] && [ ${#failures[@]} = 0 ]
