#!/usr/bin/env bash
# For an offline GPU machine: unpack the header-only dependencies (Eigen, doctest, Random123) into .deps/
# (git-ignored), which scripts/setup.sh then hands to CMake. Run it here, where apt works, then
# carry .deps/ to the GPU machine. Needs apt-get and dpkg-deb; no root needed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="$root/.deps"
mkdir -p "$deps/debs"
cd "$deps/debs"
if ! ls libeigen3-dev_*.deb doctest-dev_*.deb librandom123-dev_*.deb >/dev/null 2>&1; then
  apt-get download libeigen3-dev doctest-dev librandom123-dev
fi
for f in *.deb; do dpkg-deb -x "$f" "$deps"; done
echo "unpacked into $deps/usr:"
ls "$deps/usr/share/eigen3/cmake/Eigen3Config.cmake" "$deps/usr/lib/cmake/doctest/doctestConfig.cmake" \
  "$deps/usr/include/Random123/philox.h"
