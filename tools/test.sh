#!/usr/bin/env bash
# The README's test command: sets up the machine (tools/setup.sh), builds everything and runs every
# test with Bazel, then prints the per-test-case counts read from Bazel's test.xml files as the last
# line: "N passed, N failed[, N skipped]". GPU test cases run where a GPU is present and are counted
# skipped elsewhere. Extra arguments go to `bazel test` (e.g. --config=asan).
#
# Exit status: 0 when every test passed (skips allowed), 1 otherwise.
set -uo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$top"

tools/setup.sh >&2 || exit 2

bazel test //... "$@"
bazel_rc=$?

# Every test target, and the test.xml Bazel kept for it (written by our doctest listener, or by
# Bazel itself when the binary died before writing one). A missing file counts as one failure.
targets=$(bazel query 'tests(//...)' 2>/dev/null)
python3 - "$bazel_rc" $targets <<'PY'
import os, sys, xml.etree.ElementTree as ET
bazel_rc = int(sys.argv[1])
passed = failed = skipped = 0
broken = []
for label in sys.argv[2:]:
    pkg, name = label.lstrip("/").split(":")
    path = os.path.join("bazel-testlogs", pkg, name, "test.xml")
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        failed += 1
        broken.append(label + " (no test.xml: did not build or did not run)")
        continue
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            broken.append(label + ": " + case.get("name", "?"))
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
if bazel_rc != 0 and failed == 0:
    # Bazel failed without a failing case on record (a build error, a timeout): never report green.
    failed += 1
    broken.append(f"bazel test exited {bazel_rc}")
for b in broken:
    print("FAILED:", b)
line = f"{passed} passed, {failed} failed"
if skipped:
    line += f", {skipped} skipped"
print(line)
sys.exit(1 if failed else 0)
PY
