#!/bin/bash
# sova as a torch_memory_saver drop-in (sova.memory_saver; docs/python.md,
# "Coming from torch_memory_saver"), on one GPU, in one device call:
#   tms-tests  torch_memory_saver's own tests (test_examples.py and examples/,
#              from .carry/tms-tests) against torch_memory_saver 0.0.10 (its
#              wheel carried in .carry/tms-whl), while this tree's package
#              builds (pip install ., no build isolation: .carry/torch-whl)
#   sova-tests the same tests against sova: a directory first on PYTHONPATH
#              holds a torch_memory_saver package whose __init__ is sova's
#              (sova/_memory_saver_shim) beside torch_memory_saver's own
#              utils.py and testing_utils.py (the tests' helpers, copied from
#              the installed wheel here, never committed); then both counts,
#              and the tests that passed under torch_memory_saver but not sova
#   gpu-tests  python/tests_gpu/test_memory_saver_gpu.py
#   bench      bench/torch/memory_saver_bench.py, one process each: pause and
#              resume GiB/s of BENCH_GIB (8) GiB, discard / backup /
#              backup+retain, first and steady, torch_memory_saver then sova
#
#   tools/fetch-tms-tests GIT_DIR    first, here: copies the tests out of a
#                                    snapshot of torch_memory_saver's repository
#   OUT=DIR tools/device/memory-saver.sh     carrying .carry
#   STEPS="sova-tests bench" ...             a subset (sova-tests needs the package)
#
# Multi-device tests skip themselves on one GPU (torch_memory_saver's own
# marks). Logs: $OUT/memory-saver.log (everything, a summary last), a log per
# step, $OUT/tms-tests.xml and $OUT/sova-tests.xml (pytest's JUnit reports),
# $OUT/memory_saver.json (the bench's records). TOTAL_S (default 560) bounds
# the call; exit status 0 when every step passed.
set -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
t0=$SECONDS
total=${TOTAL_S:-560}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" || { echo "memory-saver.sh: cannot create OUT=$OUT" >&2; exit 1; }
steps=${STEPS:-tms-tests sova-tests gpu-tests bench}
export PYTHONUNBUFFERED=1 OUT
exec > >(tee "$OUT/memory-saver.log") 2>&1

source tools/device/steps.sh
source tools/device/python_env.sh

echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($(git status --short 2>/dev/null | wc -l) paths changed)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
[ -f .carry/tms-tests/test_examples.py ] ||
  { echo "memory-saver.sh: no .carry/tms-tests/test_examples.py: run tools/fetch-tms-tests first" >&2; exit 1; }
echo "torch_memory_saver's tests: revision $(cat .carry/tms-tests/REVISION 2>/dev/null || echo '?')"

use_carried_wheels .carry/torch-whl .carry/tms-whl
site_pythonpath=$PYTHONPATH
export site_pythonpath

# pytest over torch_memory_saver's tests, from their directory (they import
# `examples`), with the JUnit report in $OUT/$1.xml; its summary line last.
tms_pytest() {
  (cd .carry/tms-tests && python3 -m pytest -q -p no:cacheprovider -rfEs --junitxml="$OUT/$1.xml" test_examples.py)
}
export -f tms_pytest pip_install_sova
logs_outside_out="gpu-tests"  # a call brings back at most 8 files of $OUT

if wanted tms-tests; then
  run_step tms-tests 240 "
    (pip_install_sova 200 > /tmp/sova-pip.log 2>&1; echo \"sova package: pip exit \$?\" >> /tmp/sova-pip.log) &
    builder=\$!
    tms_pytest tms-tests
    rc=\$?
    wait \$builder
    cat /tmp/sova-pip.log
    exit \$rc"
else
  pip_install_sova 200
fi
python3 -c "import sova.memory_saver" || echo "memory-saver.sh: the sova package did not install"

if wanted sova-tests; then
  run_step sova-tests 200 "
    shim=/tmp/tms-shim/torch_memory_saver
    rm -rf /tmp/tms-shim && mkdir -p \$shim || exit 1
    real=\$(python3 -c 'import torch_memory_saver, os; print(os.path.dirname(torch_memory_saver.__file__))') || exit 1
    ours=\$(python3 -m sova.memory_saver) || exit 1
    cp \"\$ours/torch_memory_saver/__init__.py\" \$shim/ && cp \"\$real/utils.py\" \"\$real/testing_utils.py\" \$shim/ || exit 1
    PYTHONPATH=/tmp/tms-shim:\$site_pythonpath python3 -c \
      'import torch_memory_saver as t, sova.memory_saver as s; assert t.torch_memory_saver is s.torch_memory_saver' || exit 1
    PYTHONPATH=/tmp/tms-shim:\$site_pythonpath tms_pytest sova-tests"
  python3 - "$OUT/tms-tests.xml" "$OUT/sova-tests.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

def outcomes(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"no report {path}: {e}")
        return {}
    out = {}
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        out[case.get("name")] = ("failed" if kinds & {"failure", "error"} else
                                 "skipped" if "skipped" in kinds else "passed")
    return out

tms, sova = outcomes(sys.argv[1]), outcomes(sys.argv[2])
for who, got in (("torch_memory_saver", tms), ("sova.memory_saver", sova)):
    counts = {k: sum(v == k for v in got.values()) for k in ("passed", "failed", "skipped")}
    print(f"torch_memory_saver's tests against {who}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
lost = sorted(n for n, v in tms.items() if v == "passed" and sova.get(n) != "passed")
print("passed under torch_memory_saver, not under sova: " + (", ".join(lost) if lost else "none"))
EOF
fi

if wanted gpu-tests; then
  run_step gpu-tests 150 "cd /tmp && python3 -m pytest -q -p no:cacheprovider $PWD/python/tests_gpu/test_memory_saver_gpu.py"
fi

if wanted bench; then
  rm -f "$OUT/memory_saver.json"
  run_step bench 200 "
    failed=0
    for impl in tms sova; do
      python3 bench/torch/memory_saver_bench.py --impl \$impl --gib ${BENCH_GIB:-8} --cycles ${BENCH_CYCLES:-4} \
        --json $OUT/memory_saver.json | grep -v '^{' || { echo \"bench: --impl \$impl failed\"; failed=1; }
    done
    exit \$failed"
fi
finish
