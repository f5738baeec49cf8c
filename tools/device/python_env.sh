# shellcheck shell=bash
# Sourced by the device scripts that run Python (from the repository root):
# the lent machines have no network, so wheels come carried (.carry/*-whl).
#
#   use_carried_wheels DIR...   installs DIR/*.whl into /tmp/site and puts it
#                               first on PYTHONPATH and PATH ("wheels: install
#                               failed" and on when pip refuses)
#   pip_install_sova SECONDS    builds and installs this tree's `sova` package
#                               (no build isolation: meson-python from the
#                               carried wheels), within SECONDS; pip's last 3 lines

use_carried_wheels() {
  local wheels=()
  local dir
  for dir in "$@"; do wheels+=("$dir"/*.whl); done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "${wheels[@]}" ||
    echo "wheels: install failed"
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
}

pip_install_sova() {
  timeout "$1" python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=/tmp/sova-pip-build . 2>&1 | tail -3
}
