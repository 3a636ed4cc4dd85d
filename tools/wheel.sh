#!/usr/bin/env bash
# Builds mkc's Python wheel: libmkc.so optimised, then python/mkc and the library zipped as
# dist/mkc-<version>-py3-none-linux_x86_64.whl (tools/wheel.py). Install it with
#   pip install dist/mkc-*.whl
# Needs no PyTorch and no Python headers. docs/PYTHON.md says how to use it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build -c opt //runtime:libmkc.so
python3 tools/wheel.py --lib bazel-out/k8-opt/bin/runtime/libmkc.so --out "${1:-dist}"
