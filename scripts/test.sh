#!/usr/bin/env bash
# Build everything and run the whole test suite:   scripts/test.sh [ctest args]
# GPU tests run when a CUDA device is present; otherwise ctest reports them as skipped, and this
# script says how many.
set -euo pipefail
source "$(dirname "$0")/setup.sh"

fa_say "building (-j$FA_JOBS)"
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory >"$FA_BUILD.make.log" 2>&1 \
  || { tail -n 60 "$FA_BUILD.make.log" >&2; fa_say "build failed (full log: $FA_BUILD.make.log)"; exit 1; }

log="$FA_BUILD.ctest.log"
set +e
(cd "$FA_BUILD" && ctest --output-on-failure "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
skipped=$(grep -c '(Skipped)' "$log" || true)
if [ "$skipped" -gt 0 ]; then
  fa_say "$skipped test(s) skipped — GPU tests need a CUDA device; they were not run, not passed:"
  grep '(Skipped)' "$log" | sed 's/^/    /' >&2
fi
exit "$rc"
