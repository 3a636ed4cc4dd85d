#!/usr/bin/env bash
# Rewrites tests/dsl/golden/*.expected from what `mkc check` prints now. Review `git diff` after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build //:mkc >/dev/null 2>&1 || bazel build //:mkc
for f in tests/dsl/golden/*.mks; do
  args=$(head -1 "$f" | sed -n 's/^# args://p')
  # shellcheck disable=SC2086
  bazel-bin/mkc check $args "$f" 2> "${f%.mks}.expected" >/dev/null || true
done
echo "updated $(ls tests/dsl/golden/*.expected | wc -l) golden files"
