#!/usr/bin/env bash
# Configures and builds tapegrad into ${TG_BUILD_DIR:-build} (Release, Ninja).
# Extra arguments (-D...) go to CMake; given to an existing build, they
# reconfigure it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TG_BUILD_DIR:-$root/build}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
extra=()
[ "${CI:-}" = true ] && extra+=(-DTAPEGRAD_WERROR=ON)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" "$@"
elif [ $# -gt 0 ]; then
  cmake -S "$root" -B "$build" "$@"
fi
cmake --build "$build" -j "$(nproc)"
