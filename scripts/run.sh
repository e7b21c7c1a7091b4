#!/usr/bin/env bash
# The README's main command: install what is missing, configure, build, and
# run the main job. Until the Hessian benchmark exists (issue 5) the main job
# is the tensor tour sample; it reports the GPU when there is one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/configure.sh"
exec "${TG_BUILD_DIR:-$root/build}/samples/tensor_tour"
