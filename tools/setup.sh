#!/usr/bin/env bash
# mkc setup: installs what the build and tests need on a Debian 12 machine and checks the CUDA
# Toolkit. Idempotent: packages already present are not reinstalled, and a second run is quiet.
#
# Usage: tools/setup.sh [--check]     (--check: report only, install nothing)
set -euo pipefail

check_only=0
[[ "${1:-}" == "--check" ]] && check_only=1

# Debian packages: the build tool and its rule sets, the libraries of the design card, clang's
# runtime for the parser fuzzer, and LLVM 14's libTooling for the Clang plugin (compiler/clang).
packages=(
  bazel-bootstrap bazel-rules-java bazel-rules-proto bazel-platforms
  libfmt-dev nlohmann-json3-dev doctest-dev
  libibverbs-dev
  clang-14 libclang-rt-14-dev clang-format
  libclang-14-dev libclang-cpp14-dev llvm-14-dev
  python3 python3-venv
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  if ((check_only)); then
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: run tools/setup.sh (as root) to install them" >&2
    exit 2
  fi
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: not root and no sudo: install ${missing[*]} by hand" >&2; exit 2; }
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA Toolkit is not a Debian package here: check it and say how to point at it.
cuda="${CUDA_HOME:-/usr/local/cuda}"
fail=0
for f in include/cuda.h include/nvrtc.h lib64/libnvrtc.so; do
  if [[ ! -e "$cuda/$f" ]]; then
    echo "setup: CUDA Toolkit incomplete: $cuda/$f not found" >&2
    fail=1
  fi
done
if ((fail)); then
  echo "setup: install the CUDA Toolkit (12.x or 13.x, with NVRTC) or set CUDA_HOME to its root" >&2
  exit 2
fi
if [[ ! -d "$cuda/include/cccl" && ! -d "$cuda/include/cuda/std" ]]; then
  echo "setup: warning: libcu++ headers (include/cccl) not found under $cuda" >&2
fi

echo "setup: ok (CUDA Toolkit at $cuda; bazel at $(command -v bazel))"
