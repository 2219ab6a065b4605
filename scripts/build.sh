#!/usr/bin/env bash
# Bootstrap (as needed), configure and build klineage.
#   scripts/build.sh [BUILD_DIR] [extra cmake arguments…]   (default BUILD_DIR: build)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
"$here/scripts/bootstrap.sh"
cmake -S "$here" -B "$dir" "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
