#!/usr/bin/env bash
# Build everything and run the whole test suite:   scripts/test.sh [ctest args]
# GPU tests run when a CUDA device is present; otherwise ctest reports them as skipped, and this
# script says how many. Without a GPU, CMake compiles the kernels for every architecture a lab may
# have (75;80;86;89;90: CMakeLists.txt), so CI catches a change that breaks one of them.
set -euo pipefail
FA_EXTRA_PACKAGES=(python3-torch python3-pytest)  # the Python package's tests (python/tests), CPU-only torch
source "$(dirname "$0")/setup.sh"

fa_say "building (-j$FA_JOBS)"
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory >"$FA_BUILD.make.log" 2>&1 \
  || { tail -n 60 "$FA_BUILD.make.log" >&2; fa_say "build failed (full log: $FA_BUILD.make.log)"; exit 1; }

log="$FA_BUILD.ctest.log"
# Two passes. The GPU-labelled tests run first, one at a time: some measure (clocks, ceilings,
# spreads) and must have the device to themselves. Then every other test, $FA_JOBS at a time (they
# are compiles, CPU emulations and scripts, each in its own files). The non-GPU pass runs last so
# that ctest's closing summary counts the tests a machine without a GPU really ran (the GPU pass
# there is all skips). Arguments go to both passes.
set +e
(cd "$FA_BUILD" && ctest --output-on-failure -L gpu "$@") 2>&1 | tee "$log"
rc_gpu=${PIPESTATUS[0]}
cp "$FA_BUILD/Testing/Temporary/LastTest.log" "$FA_BUILD.ctest.gpu.log" 2>/dev/null
(cd "$FA_BUILD" && ctest --output-on-failure -j"$FA_JOBS" -LE gpu "$@") 2>&1 | tee -a "$log"
rc_cpu=${PIPESTATUS[0]}
set -e
rc=$(( rc_cpu != 0 ? rc_cpu : rc_gpu ))
# Both passes in one line: ctest prints "NN% tests passed, F tests failed out of T" once a pass.
read -r total failed < <(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of \([0-9]*\).*/\2 \1/p' "$log" \
  | awk '{t += $1; f += $2} END {print t + 0, f + 0}')
skipped=$(grep -c '(Skipped)' "$log" || true)
if [ "$skipped" -gt 0 ]; then
  fa_say "$skipped test(s) skipped — GPU tests need a CUDA device; they were not run, not passed:"
  grep '(Skipped)' "$log" | sed 's/^/    /' >&2
fi
# [arch] Combinations this GPU cannot run (common/core/arch.hpp): refused by the harness, not run.
refused=$(grep -h '^REFUSED: ' "$FA_BUILD.ctest.gpu.log" "$FA_BUILD/Testing/Temporary/LastTest.log" 2>/dev/null | sort -u || true)
if [ -n "$refused" ]; then
  fa_say "this GPU refused what it cannot run (checked to be refused before any launch; not run, not passed):"
  printf '%s\n' "$refused" | sed 's/^/    /' >&2
fi
fa_say "both passes: $total tests, $failed failed, $skipped skipped (not run); exit status $rc"
exit "$rc"
