#!/usr/bin/env bash
# Installs the Debian packages tapegrad builds with, when any is missing
# (as root, with apt-get); otherwise says what to install. A package counts as
# present when dpkg has it, or when what it provides is found some other way:
# the tool on PATH, or its CMake package under CMAKE_PREFIX_PATH (as on the GPU
# machine, where .devdeps/env.sh unpacks the packages into a prefix). Some
# are optional, and without apt their absence never fails: ccache (the build
# runs uncached), python3-matplotlib (the main job draws no plot), doxygen
# (no API reference), the Python bindings' python3-dev, pybind11-dev,
# python3-numpy, python3-pytest and python3-scipy (no bindings, or no Python
# tests), and the solver libraries libsundials-dev and libceres-dev (their
# samples are skipped).
set -euo pipefail
pkgs=(cmake ninja-build g++ libeigen3-dev libtbb-dev libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev libdlpack-dev python3-matplotlib doxygen ccache
      python3-dev pybind11-dev python3-numpy python3-pytest python3-scipy libsundials-dev libceres-dev)
prefixes=(/usr)
IFS=: read -r -a extra <<< "${CMAKE_PREFIX_PATH:-}"
prefixes+=("${extra[@]}")
in_prefix() {  # $1: a glob relative to a prefix
  local p f
  for p in "${prefixes[@]}"; do
    [ -n "$p" ] || continue
    for f in $p/$1; do [ -e "$f" ] && return 0; done
  done
  return 1
}
py_has() {  # a python3 on PATH, or Debian's, imports $1
  python3 -c "import $1" 2>/dev/null || { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import $1" 2>/dev/null; }
}
provided() {
  case "$1" in
    cmake) command -v cmake >/dev/null ;;
    ninja-build) command -v ninja >/dev/null ;;
    g++) command -v g++ >/dev/null ;;
    ccache) command -v ccache >/dev/null ;;
    libeigen3-dev) in_prefix "share/eigen3/cmake/Eigen3Config.cmake" ;;
    libtbb-dev) in_prefix "lib/*/cmake/TBB/TBBConfig.cmake" ;;
    libgtest-dev) in_prefix "lib/*/cmake/GTest/GTestConfig.cmake" ;;
    libgmock-dev) in_prefix "include/gmock/gmock.h" ;;
    libbenchmark-dev) in_prefix "lib/*/cmake/benchmark/benchmarkConfig.cmake" ;;
    libcli11-dev) in_prefix "share/cmake/CLI11/CLI11Config.cmake" || in_prefix "lib/*/cmake/CLI11/CLI11Config.cmake" ;;
    nlohmann-json3-dev) in_prefix "share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake" ;;
    libdlpack-dev) in_prefix "include/dlpack/dlpack.h" ;;
    python3-matplotlib) python3 -c "import matplotlib" 2>/dev/null ;;
    doxygen) command -v doxygen >/dev/null ;;
    python3-dev) in_prefix "include/python3*/Python.h" ;;
    pybind11-dev) in_prefix "lib/cmake/pybind11/pybind11Config.cmake" || in_prefix "share/cmake/pybind11/pybind11Config.cmake" ;;
    python3-numpy) py_has numpy ;;
    python3-pytest) py_has pytest ;;
    python3-scipy) py_has scipy ;;
    libsundials-dev) in_prefix "include/cvode/cvode.h" ;;
    libceres-dev) in_prefix "lib/*/cmake/Ceres/CeresConfig.cmake" ;;
    *) return 1 ;;
  esac
}
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  provided "$p" && continue
  missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
optional=" ccache python3-matplotlib doxygen python3-dev pybind11-dev python3-numpy python3-pytest python3-scipy libsundials-dev libceres-dev "
required=()
for p in "${missing[@]}"; do [[ "$optional" == *" $p "* ]] || required+=("$p"); done
can_apt=false
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && can_apt=true
export DEBIAN_FRONTEND=noninteractive
if [ ${#required[@]} -eq 0 ]; then  # only optional ones: try, never fail
  if $can_apt && apt-get update -qq >/dev/null 2>&1 &&
     apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    echo "deps: installed ${missing[*]}"
  else
    echo "deps: ${missing[*]} missing (optional); going on without" >&2
  fi
  exit 0
fi
if $can_apt; then
  echo "deps: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "deps: missing ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
exit 1
