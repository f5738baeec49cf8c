# Shared by tools/run-tests and tools/run-seed (sourced, not run).
# Sets `repo` to the repository root and cds there.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1

# Installs what is missing and puts the chosen meson/ninja first on PATH.
sova_ensure_deps() {
  local env
  env=$("$repo/tools/ensure-build-deps" --print-env) || return 1
  eval "$env"
}

# sova_configure BUILDDIR [MESON_OPTION...]: `meson setup`, or
# `meson setup --reconfigure` when BUILDDIR is already configured (which also
# regenerates a build dir made by another meson version).
sova_configure() {
  local dir=$1; shift
  if [ -f "$dir/meson-private/coredata.dat" ]; then
    # A build dir whose options changed type (tests/benchmarks became
    # auto/true/false) cannot be reconfigured: start it again, same options.
    meson setup --reconfigure "$dir" "$@" || meson setup --wipe "$dir" "$@"
  else
    meson setup "$dir" "$@"
  fi
}
