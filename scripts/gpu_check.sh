#!/usr/bin/env bash
# The check every change to a kernel (.cu) gets on a GPU machine before it is called done:
#   1. build everything (this GPU's architecture; CMake reads it from nvidia-smi);
#   2. the whole GPU test suite: `ctest -L gpu` (every test labelled gpu, not test_gpu alone);
#   3. compute-sanitizer on every step: memcheck on every variant (`bench --list --variants all`),
#      racecheck, synccheck and initcheck on each step's default variant, at a small ragged shape
#      with the mask, a small decode for a decoding step (our kernels only: a cuBLAS variant gets
#      memcheck alone; an FP8 step's default at d = 64 and 256 too, its defaults being per head dimension).
# Usage: scripts/gpu_check.sh [OUTDIR]      (default: $OUT if set, else build/gpu_check)
#   FA_SANITIZE="12 17"   only these steps' sanitizer runs (the tests still run in full)
#   FA_SANITIZE_TOOLS="memcheck"   the tools of step 3's default-variant runs
#   FA_SANITIZE_EXPERIMENTS=1  also memcheck each experiment's value (`bench --list --variants ablations`:
#                         step 12's --ablate, step 21's --pv, ...), one at a time beside the defaults
#   FA_CTEST_JOBS=4       ctest's parallelism
#   FA_CTEST_ARGS="-L gpu"  which tests (default the GPU ones; "" the whole suite: scripts/gpu_session.sh)
#   FA_COMMIT=abc1234     the commit the summary names (else git's HEAD here)
# Writes into OUTDIR: gpu_check.txt (the summary: GPU, commit, ctest's counts, one line per
# sanitizer run), ctest_gpu.log, sanitizer.log, mutant_patches.log (the GPU mutants' patches checked
# before the build). Exits 0 only when every test passed, none was
# skipped, and every sanitizer run reported no error. Progress goes to stderr.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-${OUT:-$root/build/gpu_check}}"
mkdir -p "$out"
say() { printf '[gpu_check] %s\n' "$*" >&2; printf '%s\n' "$*" >>"$out/gpu_check.txt"; }
: >"$out/gpu_check.txt"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu" ] || { say "no GPU visible (nvidia-smi): this check is for a GPU machine"; exit 2; }
command -v compute-sanitizer >/dev/null || { say "compute-sanitizer not found (it ships with the CUDA Toolkit)"; exit 2; }
say "GPU $gpu; commit ${FA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')}"

# ---- 1. build ------------------------------------------------------------------------------------
source "$root/scripts/setup.sh"
# The GPU mutants are the kernels with a lab patch applied at build time: a patch that no longer applies
# (its kernel.cu changed under it) fails the build late, after minutes of GPU-machine time. Their CPU
# tests say so in a second (re-line the hunk: tests/apply_mutant.py; the CPU run of scripts/test.sh has them).
if ! (cd "$FA_BUILD" && ctest -R 'GPU mutant .* applies to' --output-on-failure) >"$out/mutant_patches.log" 2>&1; then
  tail -n 20 "$out/mutant_patches.log" >&2
  say "a GPU mutant's patch does not apply to its kernel.cu (mutant_patches.log): fix it before building"
  exit 1
fi
say "build: $FA_BUILD (-j$FA_JOBS)"
t0=$SECONDS
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory >"$out/build.log" 2>&1 \
  || { tail -n 40 "$out/build.log" >&2; say "build failed (build.log)"; exit 1; }
say "built in $((SECONDS - t0)) s"
B="$FA_BUILD"

# ---- 2. every GPU test ---------------------------------------------------------------------------
t0=$SECONDS
ctest_args="${FA_CTEST_ARGS--L gpu}"
# shellcheck disable=SC2086
(cd "$B" && ctest $ctest_args -j"${FA_CTEST_JOBS:-4}" --output-on-failure) >"$out/ctest_gpu.log" 2>&1
test_rc=$?
# shellcheck disable=SC2086
listed=$(cd "$B" && ctest -N $ctest_args | sed -n 's/^Total Tests: *//p')
skipped=$(grep -c '(Skipped)' "$out/ctest_gpu.log" || true)
say "ctest ${ctest_args:-(every test)}: $(grep -E 'tests passed|tests failed' "$out/ctest_gpu.log" | tail -n1) of $listed listed; $skipped skipped (rc $test_rc, $((SECONDS - t0)) s)"
grep -E '^\s*[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Not Run)\)' "$out/ctest_gpu.log" | sed 's/^/  FAILED /' | while read -r l; do say "$l"; done
[ "$skipped" -gt 0 ] && { say "skipped on a GPU machine (not passed):"; grep '(Skipped)' "$out/ctest_gpu.log" | while read -r l; do say "  $l"; done; }

# ---- 3. compute-sanitizer on every step ----------------------------------------------------------
: >"$out/sanitizer.log"
small="--b 2 --h 2 --n 100 --nk 77 --d 64 --causal --reps 1 --warmup 0 --backend gpu"
# A decoding step (its --help has --qlen: a few new tokens against a cache) gets a small decode:
# GQA, ragged cache lengths, a few new tokens.
decode="--b 2 --h 4 --hkv 2 --qlen 3 --nk 300 --cache-lens 200,77 --d 64 --causal --reps 1 --warmup 0 --backend gpu"
# An FP8 step (its --help says e4m3 is its only type): every variant at d = 128, where every --v is built (step
# 21's transposers are not at d = 64), and its default at d = 64 and 256 too (below).
shape_of() {
  local help; help=$("$B/$1" --help 2>/dev/null)
  if grep -q -- '--qlen' <<<"$help"; then echo "$decode"
  elif grep -q 'e4m3 (the only one)' <<<"$help"; then echo "${small/--d 64/--d 128}"
  else echo "$small"; fi
}
steps=""
[ -n "${FA_SANITIZE:-}" ] && steps="--steps $(echo $FA_SANITIZE | tr ' ' ',')"
san_runs=0 san_fail=0
sanitize() {  # tool prog flags...
  local tool=$1 prog=$2; shift 2
  local shape="${san_shape:-$(shape_of "$prog")}"
  echo "=== $prog $shape $* ($tool)" >>"$out/sanitizer.log"
  local t=$SECONDS
  # shellcheck disable=SC2086
  compute-sanitizer --tool "$tool" --error-exitcode 99 "$B/$prog" $shape "$@" >"$out/one.log" 2>&1
  local rc=$?
  cat "$out/one.log" >>"$out/sanitizer.log"
  local summary
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/one.log" | tail -n1)
  san_runs=$((san_runs + 1))
  if [ $rc -ne 0 ]; then san_fail=$((san_fail + 1)); summary="FAIL rc $rc: ${summary:-$(tail -n1 "$out/one.log")}"; fi
  say "  $tool $prog $*${san_shape:+ at $(grep -o -- '--d [0-9]*' <<<"$san_shape")}: ${summary:-no summary} ($((SECONDS - t)) s)"
}
t0=$SECONDS
say "compute-sanitizer (shape: $small; a decoding step: $decode)"
declare -A seen
while read -r prog vflags; do
  # shellcheck disable=SC2086
  sanitize memcheck "$prog" $vflags
  if [ -z "${seen[$prog]:-}" ]; then  # a step's first variant is its default (bench --list's order)
    seen[$prog]=1
    for tool in ${FA_SANITIZE_TOOLS:-racecheck synccheck initcheck}; do
      [[ "$vflags" == *cublas* ]] && continue
      # shellcheck disable=SC2086
      sanitize "$tool" "$prog" $vflags
    done
    # An FP8 step's defaults differ per head dimension (step 21's --pv and --ops auto; its 64-byte
    # swizzle at d = 64): its default at d = 64 and 256 gets every tool as well.
    if [[ "$(shape_of "$prog")" == *"--d 128"* ]]; then
      for other in 64 256; do
        san_shape="${small/--d 64/--d $other}"
        for tool in memcheck ${FA_SANITIZE_TOOLS:-racecheck synccheck initcheck}; do
          # shellcheck disable=SC2086
          sanitize "$tool" "$prog" $vflags
        done
      done
      unset san_shape
    fi
  fi
done < <("$B/bench" --list --variants all $steps)
if [ "${FA_SANITIZE_EXPERIMENTS:-0}" = 1 ]; then  # each experiment's value (an unswept flag) under memcheck too
  declare -A exp_seen
  while read -r prog vflags; do
    [ -n "${exp_seen[$prog]:-}" ] || { exp_seen[$prog]=1; continue; }  # a step's first line is its default: done above
    # shellcheck disable=SC2086
    sanitize memcheck "$prog" $vflags
  done < <("$B/bench" --list --variants ablations $steps)
fi
rm -f "$out/one.log"
say "compute-sanitizer: $san_runs runs over ${#seen[@]} steps, $san_fail with errors ($((SECONDS - t0)) s)"

ok=1
[ "$test_rc" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$san_fail" -eq 0 ] && [ "${#seen[@]}" -gt 0 ] || ok=0
say "gpu_check: $([ $ok = 1 ] && echo PASS || echo FAIL)"
[ $ok = 1 ]
