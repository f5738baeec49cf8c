#!/usr/bin/env bash
# Builds tiny outside projects against sova as a user would, with no GPU (the
# programs run on sova's host simulation, SOVA_DRIVER=sim). One mode per
# meson test (test/packaging/meson.build), each in its own temp dir:
#
#   pkgconfig-shared  install (meson install --destdir), moved to another
#                     prefix, with every public header; sova.pc names no
#                     path of the build machine but its prefix and
#                     cuda_root; a C program built with
#                     `pkg-config --cflags --libs sova` links libsova.so and
#                     runs without LD_LIBRARY_PATH (the flags' run path); one
#                     that calls the runtime too links with it added; the
#                     installed sova-info runs
#   pkgconfig-static  the same install, libsova.so beside libsova.a: built
#                     with `pkg-config --libs --static sova-static`, and with
#                     sova-static's plain --libs, it links libsova.a (no
#                     libsova.so needed) and runs; then without libsova.so,
#                     `pkg-config --static sova` does the same
#   cmake             find_package(sova 0.1) in a CMake project: sova::sova
#                     (shared) and sova::sova_static, C++ and C programs, run;
#                     find_package(sova 1.0) must be refused
#   meson-subproject  sova as a subproject of a C project: only the library is
#                     built (no test, benchmark or tool target), and the
#                     program runs
#
# Usage: check_packaging.sh MODE BUILD_DIR SOURCE_DIR MESON
# Prints one line per check; exit 0 only when all passed.
set -uo pipefail
mode=$1 build=$(cd "$2" && pwd) src=$(cd "$3" && pwd) meson=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sova-packaging.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0
check() {  # check DESCRIPTION COMMAND...: runs COMMAND, says ok/FAILED
  local what=$1; shift
  if "$@" >"$tmp/out" 2>&1; then echo "ok: $what"
  else echo "FAILED: $what"; sed 's/^/    /' "$tmp/out" | tail -n 30; failed=$((failed + 1)); fi
}
export SOVA_DRIVER=sim
cc=${CC:-cc}

# Installs into $tmp/stage, then moves the prefix to $tmp/prefix: what is
# checked must not depend on where it was installed.
install_moved() {
  "$meson" install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" || return 1
  local configured
  configured=$("$meson" introspect "$build" --buildoptions |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
  mv "$tmp/stage$configured" "$tmp/prefix"
}
pc_dir() { dirname "$(find "$tmp/prefix" -name sova.pc | head -n 1)"; }
pc() { PKG_CONFIG_PATH=$(pc_dir) pkg-config --define-variable=prefix="$tmp/prefix" "$@" sova; }
pc_static() { PKG_CONFIG_PATH=$(pc_dir) pkg-config --define-variable=prefix="$tmp/prefix" "$@" sova-static; }

# The .pc files' only absolute paths are the prefix and the CUDA root.
pc_has_no_machine_paths() {
  local f
  for f in "$(pc_dir)/sova.pc" "$(pc_dir)/sova-static.pc"; do
    [ -f "$f" ] || { echo "not installed: $f"; return 1; }
    ! grep -v -E '^(prefix|cuda_root)=' "$f" | grep -v '^#' | grep -q '=/\|[[:space:]]/' || { echo "$f"; return 1; }
  done
}

# Every public header (include/sova/*.h, *.hpp) is installed: the root
# meson.build's install_headers lists them one by one.
headers_installed() {
  local inc h missing=0
  inc=$(dirname "$(find "$tmp/prefix" -path '*/include/sova/sova.h' | head -n 1)")
  for h in "$src"/include/sova/*.h "$src"/include/sova/*.hpp; do
    [ -f "$inc/$(basename "$h")" ] || { echo "not installed: include/sova/$(basename "$h")"; missing=1; }
  done
  return "$missing"
}

case $mode in
  pkgconfig-shared)
    check "meson install, moved to another prefix" install_moved || exit 1
    check "every public header is installed" headers_installed
    check "sova.pc: no path of the build machine but prefix and cuda_root" pc_has_no_machine_paths
    check "pkg-config --cflags names CUDA's include directory" \
      bash -c "$(declare -f pc pc_dir); tmp=$tmp; pc --cflags | grep -q -- '-I.*include' && test -f \"\$(pc --variable=cuda_includedir)/cuda_runtime_api.h\""
    check "a C program builds with pkg-config --cflags --libs sova" \
      bash -c "$cc -std=c11 -Wall -Werror -o '$tmp/c_shared' '$src/test/packaging/c_app/main.c' $(pc --cflags --libs)"
    check "it needs libsova.so and runs, found by the run path the flags set" \
      bash -c "readelf -d '$tmp/c_shared' | grep -q 'libsova.so' && env -u LD_LIBRARY_PATH '$tmp/c_shared'"
    check "a C program that calls the CUDA runtime too links with the runtime added, and runs" \
      bash -c "$cc -std=c11 -Wall -Werror -o '$tmp/c_runtime' '$src/test/packaging/c_app/calls_runtime.c' $(pc --cflags --libs) -L'$(pc --variable=cuda_libdir)' -lcudart_static -ldl -lrt -lpthread && env -u LD_LIBRARY_PATH '$tmp/c_runtime'"
    check "the installed sova-info starts (run path to the moved prefix's libsova.so) and runs" \
      bash -c "env -u LD_LIBRARY_PATH '$tmp/prefix/bin/sova-info' | grep -q 'sova will use'"
    ;;
  pkgconfig-static)
    check "meson install, moved to another prefix" install_moved || exit 1
    check "sova-static.pc names libsova.a, the runtime and the C++ library" \
      bash -c "$(declare -f pc_static pc_dir); tmp=$tmp; pc_static --static --libs | grep -q -- '-l:libsova.a' && pc_static --libs | grep -q -- '-lcudart_static' && pc_static --libs | grep -q -- '-lstdc++'"
    check "beside libsova.so, a C program links libsova.a with pkg-config --static sova-static" \
      bash -c "test -n \"\$(find '$tmp/prefix' -name 'libsova.so')\" && $cc -std=c11 -o '$tmp/c_static_both' '$src/test/packaging/c_app/main.c' $(pc_static --cflags --libs --static)"
    check "it needs no libsova.so and runs" \
      bash -c "! readelf -d '$tmp/c_static_both' | grep -q 'libsova' && env -u LD_LIBRARY_PATH '$tmp/c_static_both'"
    check "so does one linked with sova-static's --libs, without --static" \
      bash -c "$cc -std=c11 -o '$tmp/c_static_plain' '$src/test/packaging/c_app/main.c' $(pc_static --cflags --libs) && ! readelf -d '$tmp/c_static_plain' | grep -q 'libsova' && '$tmp/c_static_plain'"
    find "$tmp/prefix" -name 'libsova.so*' -delete
    check "pkg-config --static lists the runtime and C++ library" \
      bash -c "$(declare -f pc pc_dir); tmp=$tmp; pc --static --libs | grep -q -- '-lcudart_static' && pc --static --libs | grep -q -- '-lstdc++'"
    check "a C program links libsova.a with pkg-config --static" \
      bash -c "$cc -std=c11 -o '$tmp/c_static' '$src/test/packaging/c_app/main.c' $(pc --cflags --libs --static)"
    check "it needs no libsova.so and runs" \
      bash -c "! readelf -d '$tmp/c_static' | grep -q 'libsova' && '$tmp/c_static'"
    ;;
  cmake)
    check "meson install, moved to another prefix" install_moved || exit 1
    check "cmake configures with find_package(sova 0.1)" \
      cmake -S "$src/test/packaging/cmake_app" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release
    check "cmake builds sova::sova and sova::sova_static programs" cmake --build "$tmp/cmake" -j 2
    libdir=$(dirname "$(find "$tmp/prefix" -name 'libsova.so' | head -n 1)")
    check "the sova::sova program needs libsova.so and runs" \
      bash -c "readelf -d '$tmp/cmake/app_shared' | grep -q libsova.so && LD_LIBRARY_PATH='$libdir' '$tmp/cmake/app_shared'"
    check "the sova::sova_static programs (C++, C) need no libsova.so and run" \
      bash -c "! readelf -d '$tmp/cmake/app_static' | grep -q libsova && '$tmp/cmake/app_static' && '$tmp/cmake/c_app_static'"
    mkdir -p "$tmp/v1"
    sed 's/find_package(sova 0.1 REQUIRED)/find_package(sova 1.0 REQUIRED)/' \
      "$src/test/packaging/cmake_app/CMakeLists.txt" >"$tmp/v1/CMakeLists.txt"
    cp "$src/test/packaging/cmake_app/main.cpp" "$tmp/v1/"
    mkdir -p "$tmp/c_app" && cp "$src/test/packaging/c_app/main.c" "$tmp/c_app/"
    check "find_package(sova 1.0) refuses 0.x" \
      bash -c "! cmake -S '$tmp/v1' -B '$tmp/v1/build' -DCMAKE_PREFIX_PATH='$tmp/prefix'"
    ;;
  meson-subproject)
    mkdir -p "$tmp/src/meson_app/subprojects"
    cp "$src/test/packaging/meson_app/meson.build" "$tmp/src/meson_app/"
    cp -r "$src/test/packaging/c_app" "$tmp/src/"
    ln -s "$src" "$tmp/src/meson_app/subprojects/sova"
    # -O0: only the library's build time matters here.
    check "meson setup of a project with sova as a subproject" \
      "$meson" setup "$tmp/build" "$tmp/src/meson_app" --buildtype=debug
    check "only the library's targets and the app are defined" \
      bash -c "'$meson' introspect '$tmp/build' --targets | python3 -c '
import json, sys
names = sorted({t[\"name\"] for t in json.load(sys.stdin)})
print(names)
sys.exit(0 if set(names) <= {\"sova\", \"app\"} and \"app\" in names else 1)'"
    check "the app builds" "$meson" compile -C "$tmp/build" app
    check "the app runs" "$tmp/build/app"
    ;;
  *) echo "check_packaging.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
echo "$failed failed"
[ "$failed" = 0 ]
