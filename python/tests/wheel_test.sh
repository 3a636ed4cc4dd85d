#!/usr/bin/env bash
# The Python package as a user gets it: the wheel (built by //python:wheel, as tools/wheel.sh
# builds it) installed into a fresh virtual environment with no network and no other package,
# then python/tests run against it from outside the source tree. Needs python3 with venv
# (tools/setup.sh installs python3-venv); no GPU, no PyTorch.
set -euo pipefail
# Run from the runfiles' root (Bazel's test working directory), where samples/ is.
wheel="$1"; tests_dir="$(dirname "$2")"; samples=samples
work="${TEST_TMPDIR:-$(mktemp -d)}/venv"
python3 -m venv "$work"
# A wheel's file name carries its tags; Bazel's output keeps the standard name.
"$work/bin/pip" install --no-index --no-deps --disable-pip-version-check -q "$wheel"
cd "${TEST_TMPDIR:-/tmp}"
MKC_SAMPLES="$OLDPWD/$samples" "$work/bin/python" "$OLDPWD/$tests_dir/run_tests.py"
