#!/usr/bin/env bash
# What --dropout costs a backward (docs/19_hopper_backward.md, "Dropout"): each step's backward at each
# point with and without --dropout 0.1, point by point in turn, so that a drift of the GPU's clock over
# the run lands on both sides of a ratio alike. FlashAttention's benchmark shapes (B·N = 16k, H·d = 2048).
#   scripts/bwd_dropout.sh OUTDIR     (after a build: FA_BUILD, default build/, must hold each step's program)
# FA_STEPS (default "19 13"), FA_NS (default "4096 16384"), FA_DS ("128 64"), FA_CAUSAL ("0 1"), FA_DTYPES
# ("bf16") pick the points; FA_DEADLINE (seconds since the epoch) stops new points from starting.
# Writes into OUTDIR:
#   dropout_<gpu>_bwd.csv   date, commit, then the step program's --csv columns: one row per run (its
#                           variant names dropout=0.1 when it had the mask; bwd_ms is the kernel time)
# Every run is checked against the reference on one head (--check-heads 1); a failed check is a row with
# pass = 0 or bwd_pass = 0, and the exit status is 1.
set -uo pipefail
me=bwd_dropout.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
steps=${FA_STEPS:-19 13}
for s in $steps; do need_programs "step$s"; done
f="$out/dropout_${slug}_bwd.csv"
fail=0
run() {  # run STEP ARGS...: one checked run, its --csv row appended (the header once)
  local step=$1; shift
  local res; res=$("$build/step$step" --backend gpu --csv --reps 10 --check-heads 1 "$@" 2>/dev/null)
  local rc=$?
  [ -s "$f" ] || echo "date,commit,$(echo "$res" | head -n1)" >"$f"
  if [ -n "$(echo "$res" | sed -n 2p)" ]; then echo "$date_utc,$commit,$(echo "$res" | sed -n 2p)" >>"$f"; fi
  [ $rc -eq 0 ] || { echo "$me: step$step $* exited $rc" >&2; fail=1; }
  echo "[$me] step$step $* (rc $rc)" >&2
}
for dt in ${FA_DTYPES:-bf16}; do for d in ${FA_DS:-128 64}; do for c in ${FA_CAUSAL:-0 1}; do for n in ${FA_NS:-4096 16384}; do
  for s in $steps; do
    if [ -n "${FA_DEADLINE:-}" ] && [ "$(date +%s)" -ge "$FA_DEADLINE" ]; then
      echo "$me: deadline reached before step$s $dt d=$d causal=$c N=$n" >&2; exit $(( fail ? 1 : 3 ))
    fi
    shape=(--b $((16384 / n)) --h $((2048 / d)) --n "$n" --d "$d" --dtype "$dt")
    [ "$c" = 1 ] && shape+=(--causal)
    run "$s" "${shape[@]}"
    run "$s" "${shape[@]}" --dropout 0.1
  done
done; done; done; done
exit $fail
