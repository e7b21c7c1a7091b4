#!/usr/bin/env bash
# The README's main command: install what is missing, configure, build, and
# run the main job: the Hessian benchmark (bench/hessian), on the GPU when
# there is one (B = 10000, every activation, precision and strategy), else on
# the CPU with B scaled down; its results go to build/hessian.json and a plot of
# them to build/hessian.png. Extra arguments go to the benchmark. The build
# is for this machine's CPU (TAPEGRAD_NATIVE=ON: -march=native), which the
# library's default leaves off so that its binaries run on any x86-64.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/configure.sh" -DTAPEGRAD_NATIVE=ON
build=${TG_BUILD_DIR:-$root/build}
"$build/bench/hessian" --out "$build/hessian.json" "$@"
# The table as a picture beside the JSON (python3-matplotlib; the peers'
# figures join it when bench/peers/hessian_peers.py --out wrote
# $build/hessian_peers.json).
for py in python3 /usr/bin/python3; do
  if "$py" -c "import matplotlib" 2>/dev/null; then
    exec "$py" "$root/scripts/plot_hessian.py" "$build/hessian.json"
  fi
done
echo "run: no python3 with matplotlib here; the plot was not drawn (install python3-matplotlib)" >&2
