#!/usr/bin/env bash
# Build one program and run it:   scripts/run.sh [stepNN|tour] [flags]
#   scripts/run.sh                     the tour (step 01 until the tour exists)
#   scripts/run.sh step01 --causal     step 01 on the GPU if there is one, else its CPU blueprint
#   scripts/run.sh step01 --help       every flag
set -euo pipefail
source "$(dirname "$0")/setup.sh"

target="${1:-tour}"
[ $# -gt 0 ] && shift
if [ "$target" = "tour" ] && ! grep -q "^tour:" "$FA_BUILD/Makefile" 2>/dev/null; then
  fa_say "no tour yet: running step01"
  target=step01
fi
case "$target" in
  -*) fa_say "the first argument names a program (stepNN or tour); flags come after it"; exit 2 ;;
esac
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory "$target" >"$FA_BUILD.make.log" 2>&1 \
  || { cat "$FA_BUILD.make.log" >&2; fa_say "build of $target failed"; exit 1; }
exec "$FA_BUILD/$target" "$@"
