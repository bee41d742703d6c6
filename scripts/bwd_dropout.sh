#!/usr/bin/env bash
# What --dropout costs a backward (docs/19_hopper_backward.md, "Dropout"): each step's backward at each
# point with and without --dropout 0.1, point by point in turn, so that a drift of the GPU's clock over
# the run lands on both sides of a ratio alike. FlashAttention's benchmark shapes (B·N = 16k, H·d = 2048).
#   scripts/bwd_dropout.sh OUTDIR     (after a build: FA_BUILD, default build/, must hold each step's program)
# FA_STEPS (default "19 13"), FA_NS (default "4096 16384"), FA_DS ("128 64"), FA_CAUSAL ("0 1"), FA_DTYPES
# ("bf16") pick the points; FA_DEADLINE (seconds since the epoch) stops new points from starting.
# Run again on the same OUTDIR, it resumes: a run whose row the file has is not repeated.
# Writes into OUTDIR:
#   dropout_<gpu>_bwd.csv   date, commit, then the step program's --csv columns: one row per run (its
#                           variant names dropout=0.1 when it had the mask; bwd_kernel_ms is the kernel time)
# Every run is checked against the reference on one head (--check-heads 1); a failed check is a row with
# pass = 0 or bwd_pass = 0, and the exit status is 1.
set -uo pipefail
me=bwd_dropout.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
steps=${FA_STEPS:-19 13}
for s in $steps; do need_programs "step$s"; done
# A step that refuses dropout by default (step 19: --dropout-kernel refuse) runs it here with its opt-in flag.
declare -A opt_in
for s in $steps; do
  "$build/step$s" --help 2>/dev/null | grep -q -- "^  --dropout-kernel " && opt_in[$s]="--dropout-kernel run" || opt_in[$s]=""
done
f="$out/dropout_${slug}_bwd.csv"
fail=0
# have STEP DTYPE B H N D CAUSAL DROP: the file has that run's row already (resume after an interrupt).
have() {
  [ -s "$f" ] && awk -F, -v s="$1" -v t="$2" -v b="$3" -v h="$4" -v n="$5" -v d="$6" -v c="$7" -v x="$8" '
    NR > 1 && $3 == s && $7 == t && $8 == b && $9 == h && $10 == n && $12 == d && $13 == c &&
      (index($4, "dropout=") > 0) == (x == 1) { found = 1 } END { exit !found }' "$f"
}
for n in ${FA_NS:-4096 16384}; do for dt in ${FA_DTYPES:-bf16}; do for d in ${FA_DS:-128 64}; do for c in ${FA_CAUSAL:-0 1}; do
  for s in $steps; do
    if [ -n "${FA_DEADLINE:-}" ] && [ "$(date +%s)" -ge "$FA_DEADLINE" ]; then
      echo "$me: deadline reached before step$s $dt d=$d causal=$c N=$n" >&2; exit $(( fail ? 1 : 3 ))
    fi
    b=$((16384 / n)) h=$((2048 / d))
    shape=(--b $b --h $h --n "$n" --d "$d" --dtype "$dt")
    [ "$c" = 1 ] && shape+=(--causal)
    have "$s" "$dt" $b $h "$n" "$d" "$c" 0 || run_step "$f" "$s" "${shape[@]}"
    have "$s" "$dt" $b $h "$n" "$d" "$c" 1 || run_step "$f" "$s" "${shape[@]}" --dropout 0.1 ${opt_in[$s]}
  done
done; done; done; done
exit $fail
