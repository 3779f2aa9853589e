#!/usr/bin/env bash
# Builds the demo VQA dataset (issue 5 item 9) from real photographs that a Debian package ships:
#   lomiri-wallpapers-16.04 (Debian 12 main, 15.8 MB download, no dependencies): 15 JPEG photographs
#   (landscapes, plants, animals, objects) at their natural resolutions, 1365x1074 .. 5312x2988, landscape and
#   portrait.
# Usage: scripts/make_demo_data.sh [OUT_DIR] [extra `vlpar-data make-demo` options, e.g. --images 4000 --seed 1]
#   OUT_DIR                 default runs/demo_data (generated, git-ignored: never commit it)
#   VLPAR_BUILD_DIR         build directory holding tools/vlpar-data (default build/cpu; built if missing)
#   VLPAR_DEMO_PHOTOS=DIR   use the *.jpg/*.jpeg/*.png of DIR instead of the package (no apt-get)
# Idempotent: installs the package only when it is missing (needs root or sudo then) and replaces a previous demo
# dataset in OUT_DIR. The generator is deterministic: same photographs, options and seed -> same bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-runs/demo_data}"
[ $# -gt 0 ] && shift
package=lomiri-wallpapers-16.04
build_dir="${VLPAR_BUILD_DIR:-build/cpu}"
tool="$build_dir/tools/vlpar-data"
start=$(date +%s.%N)

photo_list="$(mktemp)"
trap 'rm -f "$photo_list"' EXIT
if [ -n "${VLPAR_DEMO_PHOTOS:-}" ]; then
  find "$VLPAR_DEMO_PHOTOS" -maxdepth 1 -type f \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' \) | LC_ALL=C sort > "$photo_list"
  source_text="photographs of $VLPAR_DEMO_PHOTOS"
else
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    echo "make_demo_data: installing $package (Debian wallpapers: real photographs, 15.8 MB)"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "$package"
  fi
  dpkg -L "$package" | grep -iE '\.(jpe?g|png)$' | LC_ALL=C sort > "$photo_list"
  source_text="Debian package $package $(dpkg-query -W -f='${Version}' "$package")"
fi
if [ ! -s "$photo_list" ]; then
  echo "make_demo_data: no photographs found ($source_text)" >&2
  exit 1
fi

if [ ! -x "$tool" ]; then
  echo "make_demo_data: building vlpar-data in $build_dir"
  [ -f "$build_dir/CMakeCache.txt" ] || cmake --preset cpu -B "$build_dir" > /dev/null
  cmake --build "$build_dir" --target vlpar-data -j "$(nproc)"
fi

mkdir -p "$out"
"$tool" make-demo --out "$out" --photo-list "$photo_list" --source "$source_text" --overwrite "$@"
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v o="$out" 'BEGIN { printf "make_demo_data: done in %.1f s -> %s\n", e - s, o }'
