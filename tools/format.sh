#!/usr/bin/env bash
# Formats mkc's C++/CUDA sources with clang-format (.clang-format at the root).
# tools/format.sh          rewrite files in place
# tools/format.sh --check  change nothing; list unformatted files and exit 1 if any
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cc' '*.cuh' '*.cu' | grep -v -e '^third_party/' -e '^docs/example/')
((${#files[@]})) || exit 0
if [[ "${1:-}" == "--check" ]]; then
  clang-format --dry-run --Werror "${files[@]}" 2>&1 | grep -E '^[^ ].*: (error|warning)' | cut -d: -f1 | sort -u > /tmp/mkc_format.$$ || true
  if [[ -s /tmp/mkc_format.$$ ]]; then
    echo "format: these files need tools/format.sh:" >&2
    sed 's/^/  /' /tmp/mkc_format.$$ >&2
    rm -f /tmp/mkc_format.$$
    exit 1
  fi
  rm -f /tmp/mkc_format.$$
  echo "format: ok (${#files[@]} files)"
else
  clang-format -i "${files[@]}"
fi
