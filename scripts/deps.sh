#!/usr/bin/env bash
# Installs the Debian packages tapegrad builds with, when any is missing
# (as root, with apt-get); otherwise says what to install.
set -euo pipefail
pkgs=(cmake ninja-build g++ libeigen3-dev libtbb-dev libgtest-dev libgmock-dev libbenchmark-dev ccache)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "deps: missing ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
