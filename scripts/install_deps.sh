#!/usr/bin/env bash
# Installs vlpar's build and test dependencies from Debian packages, only those that are missing.
# Idempotent: a second run installs nothing. Needs root (or sudo) only when something is missing.
# The CUDA toolkit is optional and never installed here: vlpar builds CPU-only without it.
set -euo pipefail
packages=(
  cmake g++ make pkg-config python3
  libeigen3-dev libfmt-dev nlohmann-json3-dev
  libjpeg62-turbo-dev libpng-dev libpcre2-dev libyaml-cpp-dev libtomlplusplus-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-context-dev      # fibers of the CUDA emulation tier (preset emu)
  libopenmpi-dev openmpi-bin
  clang libclang-rt-14-dev   # stage sanitize: ASan/UBSan and TSan builds (presets sanitize, tsan)
  lomiri-wallpapers-16.04   # real photographs for the demo VQA data (scripts/demo.sh) and its CI test
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
