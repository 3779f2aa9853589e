#!/usr/bin/env bash
# Run on a networked Debian 12 machine before a GPU day: downloads the Debian packages that bench/gpu/validate.sh
# needs and a bare GPU machine lacks (headers and static libraries only: Eigen, fmt, GoogleTest) into
# bench/gpu/deps/. validate.sh unpacks them into a private prefix (dpkg -x, no root, no apt). The CUDA toolkit
# (nvcc, cuobjdump, compute-sanitizer), CMake and a compiler must already be on the GPU machine.
# Usage: bench/gpu/prepare.sh        (then copy or carry bench/gpu/deps/ with the tree)
set -euo pipefail
cd "$(dirname "$0")"
packages=(libeigen3-dev libfmt-dev libfmt9 libgtest-dev googletest)
rm -rf deps && mkdir -p deps && cd deps
apt-get download "${packages[@]}"
ls -l ./*.deb
echo "prepare: ${#packages[@]} packages in bench/gpu/deps (used by bench/gpu/validate.sh)"
