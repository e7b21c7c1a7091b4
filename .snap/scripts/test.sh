#!/usr/bin/env bash
# The README's test command: install what is missing, configure, build, and
# run the whole suite (GPU tests skip with a message where there is no GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/configure.sh"
ctest --test-dir "${TG_BUILD_DIR:-$root/build}" --output-on-failure -j "$(nproc)"
