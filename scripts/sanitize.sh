#!/usr/bin/env bash
# The whole suite under ASan+UBSan (UBSan fatal) and under TSan, and the
# fuzz targets under ASan+UBSan (Debug builds in
# build-asan/ and build-tsan/, or under $TG_SAN_DIR). CI runs it after the
# README's test command. Under TSan the CPU kernels run on the calling thread
# (Debian's TBB is not instrumented; see tensor/cpu/loops.cpp). Both are
# builds without CUDA (cuda/stub.cpp): CI has no GPU, so no device code would
# run; this saves two Debug nvcc compiles and keeps the CUDA-less
# configuration built and tested. The README's test command (before this)
# builds and tests the CUDA configuration without a GPU; device code runs
# under compute-sanitizer on the GPU machine (scripts/gpu.sh sanitize).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${TG_SAN_DIR:-$root}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
for san in address,undefined thread; do
  case $san in thread) dir=$base/build-tsan ;; *) dir=$base/build-asan ;; esac
  cmake -S "$root" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Debug -DTAPEGRAD_CUDA=OFF \
    -DTAPEGRAD_SANITIZE="$san" -DTAPEGRAD_BUILD_BENCH=OFF -DTAPEGRAD_BUILD_SAMPLES=OFF >/dev/null
  cmake --build "$dir" -j "$(nproc)"
  skip=()
  if [ "$san" = thread ]; then
    # Under TSan the CPU kernels run on the calling thread, so these tests
    # (the heaviest: finite-difference gradchecks of every op and layout,
    # 10-20 minutes of CI time under a sanitizer) start no thread and give
    # TSan nothing to check; ASan/UBSan runs them. Every test that starts
    # threads (engine workers, hooks, allocator, streams, depth) runs here.
    skip=(-E 'OpTable\.GradcheckAndGradgradcheckEveryOp|^Binary\.EveryOpLayoutAndDtype|^Unary\.EveryOpLayoutAndDtype|^Fno\.SpectralConv2dAndFnoGradientsOfEveryOrder|^TaylorMode\.FusedOrderTwoRuleGradchecks|^Sparse\.GradcheckAndGradgradcheck|^LinalgKernels\.|^AutogradOps\.ActivationGradEveryOrder')
  fi
  ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "${skip[@]}"
  if [ "$san" = address,undefined ]; then
    # The fuzz targets (tests/fuzz) from their seed corpora, a fixed number
    # of deterministic inputs each (TG_FUZZ_RUNS), so that every machine
    # runs the same inputs and CI's verdict does not depend on its speed.
    # The counts take about 30 s each on CI's 2-core machine (safetensors
    # inputs are the slowest to parse); TG_FUZZ_RUNS sets one count for all.
    # Longer runs for developers: TG_FUZZ_RUNS=10000000, or TG_FUZZ_SECONDS.
    for tr in safetensors:40000 dlpack:300000 capi:200000; do
      t=${tr%%:*}
      env -u TG_FUZZ_SECONDS TG_FUZZ_RUNS="${TG_FUZZ_RUNS:-${tr##*:}}" "$dir/tests/fuzz_$t" "$root/tests/fuzz/corpus/$t"
    done
  fi
done
