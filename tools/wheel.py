#!/usr/bin/env python3
"""Writes mkc's Python wheel: the package python/mkc and libmkc.so, as
dist/mkc-<version>-py3-none-linux_x86_64.whl. Standard library only (no setuptools, no pip, no
PyTorch or Python headers): a wheel is a zip with a METADATA, a WHEEL and a RECORD of every
file's SHA-256.

Usage: tools/wheel.py --lib PATH/libmkc.so [--package python/mkc] [--out DIR | --output FILE]
"""
import argparse
import base64
import hashlib
import os
import re
import sys
import zipfile

TAG = "py3-none-linux_x86_64"


def version_of(package):
    with open(os.path.join(package, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        sys.exit(f"wheel: no __version__ in {package}/__init__.py")
    return m.group(1)


def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="the libmkc.so to ship (bazel build -c opt "
                                                 "//runtime:libmkc.so)")
    ap.add_argument("--package", default=os.path.join(os.path.dirname(__file__), "..", "python",
                                                      "mkc"))
    ap.add_argument("--out", default="dist", help="directory for the wheel (dist)")
    ap.add_argument("--output", help="the wheel's path instead of OUT/<its standard name>")
    args = ap.parse_args()
    version = version_of(args.package)
    name = f"mkc-{version}-{TAG}.whl"
    path = args.output or os.path.join(args.out, name)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    info = f"mkc-{version}.dist-info"
    files = []
    for entry in sorted(os.listdir(args.package)):
        if entry.endswith(".py"):
            with open(os.path.join(args.package, entry), "rb") as f:
                files.append((f"mkc/{entry}", f.read(), 0o644))
    with open(args.lib, "rb") as f:
        files.append(("mkc/libmkc.so", f.read(), 0o755))
    metadata = (f"Metadata-Version: 2.1\nName: mkc\nVersion: {version}\n"
                "Summary: fused multi-GPU kernels compiled from .mks schedules\n"
                "Requires-Python: >=3.9\n").encode()
    wheel = (f"Wheel-Version: 1.0\nGenerator: mkc tools/wheel.py\nRoot-Is-Purelib: false\n"
             f"Tag: {TAG}\n").encode()
    files += [(f"{info}/METADATA", metadata, 0o644), (f"{info}/WHEEL", wheel, 0o644)]
    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d, _ in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode(), 0o644))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data, mode in files:
            zi = zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    print(path)


if __name__ == "__main__":
    main()
