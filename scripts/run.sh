#!/usr/bin/env bash
# The README's main command: install what is missing, configure, build, and
# run the main job: the Hessian benchmark (bench/hessian), on the GPU when
# there is one (B = 10000, every activation, precision and strategy), else on
# the CPU with B scaled down. Extra arguments go to the benchmark. The build
# is for this machine's CPU (TAPEGRAD_NATIVE=ON: -march=native), which the
# library's default leaves off so that its binaries run on any x86-64.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/configure.sh" -DTAPEGRAD_NATIVE=ON
exec "${TG_BUILD_DIR:-$root/build}/bench/hessian" "$@"
