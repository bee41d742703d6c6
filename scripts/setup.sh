#!/usr/bin/env bash
# Shared set-up for scripts/run.sh and scripts/test.sh (source it; do not run it):
#   1. make sure the dependencies are there — Debian packages, or the carried .deps/ folder on an
#      offline GPU machine (scripts/fetch_deps.sh makes it);
#   2. configure CMake into build/ (the default Makefile generator, so `make step06` works there), or
#      into FA_BUILD; FA_CMAKE_EXTRA (a bash array set before sourcing) adds CMake arguments;
#   3. touch the sources whose content changed since that folder's last set-up (scripts/fresh.sh).
# Exits with a message (status 1) when something is missing that it may not install itself.

FA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FA_BUILD="${FA_BUILD:-$FA_ROOT/build}"
FA_PACKAGES=(cmake make g++ libeigen3-dev doctest-dev libgnuplot-iostream-dev gnuplot-nox librandom123-dev)
# What the caller needs beyond those (scripts/test.sh: Debian's PyTorch and pytest, for the Python
# package's tests), set as a bash array before sourcing.
FA_PACKAGES+=("${FA_EXTRA_PACKAGES[@]}")

fa_say() { printf '[fa] %s\n' "$*" >&2; }

fa_deps() {
  if [ -d "$FA_ROOT/.deps/usr" ]; then
    # Offline machine: header-only dependencies unpacked into .deps/ (no apt needed).
    FA_CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$FA_ROOT/.deps/usr")
    return 0
  fi
  local missing=()
  for p in "${FA_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    fa_say "missing Debian packages: ${missing[*]}"
    fa_say "install them with:"
    printf '  sudo apt-get install -y %s\n' "${missing[*]}" >&2
    exit 1
  fi
  fa_say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || { fa_say "apt-get update failed"; exit 1; }
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || { fa_say "apt-get install failed"; exit 1; }
}

fa_configure() {
  # nvcc lives outside PATH on many machines; CMake finds it through CUDACXX.
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  # Configure when the build folder is new or its arguments changed (kept beside its cache).
  local args="${FA_CMAKE_ARGS[*]}"
  if [ ! -f "$FA_BUILD/Makefile" ] || [ "$(cat "$FA_BUILD/.fa_cmake_args" 2>/dev/null)" != "$args" ]; then
    mkdir -p "$FA_BUILD"
    cmake -S "$FA_ROOT" -B "$FA_BUILD" -DCMAKE_BUILD_TYPE=Release "${FA_CMAKE_ARGS[@]}" >"$FA_BUILD.configure.log" 2>&1 \
      || { cat "$FA_BUILD.configure.log" >&2; fa_say "CMake configuration failed"; exit 1; }
    grep -E "^-- CUDA:" "$FA_BUILD.configure.log" | sed 's/^-- /[fa] /' >&2 || true
    printf '%s' "$args" >"$FA_BUILD/.fa_cmake_args"
  fi
}

# shellcheck source=fresh.sh
source "$FA_ROOT/scripts/fresh.sh"

FA_CMAKE_ARGS=("${FA_CMAKE_EXTRA[@]}")
fa_deps
fa_configure
fa_fresh "$FA_ROOT" "$FA_BUILD"
FA_JOBS="${FA_JOBS:-$(nproc 2>/dev/null || echo 2)}"
