#!/usr/bin/env bash
# Build one program and run it:   scripts/run.sh [stepNN|tour|python] [flags]
#   scripts/run.sh                     the tour: every step on one shape (a first run; on a GPU at
#                                      N = 1024 with five timed reps, to be quick)
#   scripts/run.sh step01 --causal     step 01 on the GPU if there is one, else its CPU blueprint
#   scripts/run.sh step01 --help       every flag
#   scripts/run.sh python [FILE.py …]  the Python package's C library (python/, docs/python.md), then
#                                      FILE.py (default python/examples/first_call.py) with PYTHONPATH set
# It builds only what that program needs. With a GPU (nvidia-smi sees one) it builds in build/ for
# that GPU's architecture alone; without one it builds the CPU parts only (no kernel is compiled:
# nothing could run them) in build-cpu/, so a first run takes minutes, not a quarter of an hour.
# scripts/test.sh is the other command: everything, every architecture, every test.
set -euo pipefail
FA_CMAKE_EXTRA=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  FA_BUILD="${FA_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build-cpu}"
  FA_CMAKE_EXTRA=(-DFA_ENABLE_CUDA=OFF)
  printf '[fa] no GPU visible: building the CPU blueprints only, in %s\n' "$FA_BUILD" >&2
fi
source "$(dirname "$0")/setup.sh"

target="${1:-tour}"
[ $# -gt 0 ] && shift
quick=()
if [ "$target" = tour ] && [ $# -eq 0 ] && [ -z "${FA_CMAKE_EXTRA[*]}" ]; then
  # A first look on a GPU: N = 1024, so that the reference on the CPU checks each step in a moment
  # (`scripts/run.sh tour` alone, with any flag, runs the tour's own benchmark shape, N = 4096).
  quick=(--n 1024 --reps 5)
  fa_say "the tour at N = 1024, five timed reps (a quick first look; 'scripts/run.sh tour --n 4096' for the benchmark shape)"
fi
case "$target" in
  -*) fa_say "the first argument names a program (stepNN or tour); flags come after it"; exit 2 ;;
esac
if [ "$target" = python ]; then
  # The package: its C library, then a script with a Python that imports torch (Debian: python3-torch).
  fa_say "building fa_python, the package's C library (-j$FA_JOBS; full log: $FA_BUILD.make.log)"
  make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory fa_python >"$FA_BUILD.make.log" 2>&1 \
    || { tail -n 40 "$FA_BUILD.make.log" >&2; fa_say "build of fa_python failed"; exit 1; }
  py=""
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch" 2>/dev/null; then py="$p"; break; fi
  done
  [ -n "$py" ] || { fa_say "no python3 here imports torch (Debian: apt-get install python3-torch)"; exit 1; }
  root="$(cd "$(dirname "$0")/.." && pwd)"
  export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" FLASH_ATTN_STEPS_LIB="$FA_BUILD/libfa_python.so"
  if [ $# -eq 0 ] || [[ "$1" == -* ]]; then set -- "$root/python/examples/first_call.py" "$@"; fi
  exec "$py" "$@"
fi
if ! grep -q "^$target:" "$FA_BUILD/Makefile" 2>/dev/null; then
  fa_say "no program '$target' (programs: tour, step01 ... step21, bench, model; python for the package)"
  exit 2
fi
# make's own progress, one line per target built ("[ 40%] Built target fa_step07").
fa_say "building $target (-j$FA_JOBS; full log: $FA_BUILD.make.log)"
set +e
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory "$target" 2>&1 | tee "$FA_BUILD.make.log" \
  | grep --line-buffered -E '^\[ *[0-9]+%\] Built target' | sed -u 's/^/[fa] /' >&2
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  grep -E -B2 -A12 'error|Error' "$FA_BUILD.make.log" | head -n 60 >&2
  fa_say "build of $target failed (full log: $FA_BUILD.make.log)"
  exit 1
fi
exec "$FA_BUILD/$target" "${quick[@]}" "$@"
