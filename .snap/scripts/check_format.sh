#!/usr/bin/env bash
# Every C/C++/CUDA source and header of the repository is as clang-format
# writes it with .clang-format (the `format` test). Usage:
#   scripts/check_format.sh [clang-format]      check (exit 1 listing files)
#   scripts/check_format.sh [clang-format] -i   reformat in place
# The style is checked with clang-format 14 (Debian bookworm's); another
# major version formats some constructs differently, so the check is
# skipped there (CTest's SKIP_RETURN_CODE 77).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${1:-clang-format}
mode=${2:-}
version=$("$cf" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$version" != 14 ] && [ "$mode" != -i ]; then
  echo "format: clang-format $version is not 14; not checked"
  exit 77
fi
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || true)
if [ ${#files[@]} -eq 0 ]; then  # not a git checkout (a source archive)
  mapfile -t files < <(find tensor cuda autograd nn graphs optim distributed capi python include tests bench samples \
    -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' | sort)
fi
if [ "$mode" = -i ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --dry-run -Werror "$f" > /dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not clang-formatted (run scripts/check_format.sh clang-format -i):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format: ${#files[@]} files clang-formatted"
