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
# Under --config=san the library is built with ASan and UBSan, and Python is not: their runtimes
# must be loaded first, and Python's own allocations are not this test's leaks.
lib="$("$work/bin/python" -c 'import mkc, os; print(os.path.join(os.path.dirname(mkc.__file__), "libmkc.so"))')"
if nm -D "$lib" 2>/dev/null | grep __asan_init > /dev/null; then  # not -q: nm must not die of SIGPIPE under pipefail
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
fi
cd "${TEST_TMPDIR:-/tmp}"
MKC_SAMPLES="$OLDPWD/$samples" "$work/bin/python" "$OLDPWD/$tests_dir/run_tests.py"
