#!/usr/bin/env bash
# Step 13's backward against PyTorch's FlashAttention-2 (flash) and cuDNN backends, in one run on one
# GPU (docs/13_mma_backward.md, "Measured"): FlashAttention's benchmark shapes (B·N = 16k, H·d =
# 2048) over the backward target matrix of scripts/targets.txt ("bwd": N = 1k, 4k, 16k, d = 64 and 128,
# causal and not, fp16 and bf16).
#   scripts/bwd_target.sh OUTDIR     (after a build: FA_BUILD, default build/, must hold step13 and step12)
# Writes into OUTDIR:
#   target_<gpu>_step13.csv   date, commit, then step13 --csv's columns: one row per shape (default),
#                             then --deterministic (bf16), then --dropout 0.1 (bf16, N = 4k)
#   dropout_<gpu>_step12.csv  step 12's forward at N = 4k with and without --dropout 0.1 (bf16)
#   peers_<gpu>_bwd.csv       scripts/peers.py --backends flash,cudnn on the same shapes
# Every run is checked against the reference (the step program's own check, on one head: --check-heads 1
# keeps the CPU side of a long run short); a failed check is a
# row with pass = 0, and the script's exit status is 1.
set -uo pipefail
me=bwd_target.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
source "$root/scripts/targets.sh"       # target, target_words: the matrices of scripts/targets.txt
ds=$(target_words bwd ds) && dtypes=$(target_words bwd dtypes) && masks=$(target_words bwd causal) \
  && ns=$(target_words bwd ns) || exit 2
fail=0
t="$out/target_${slug}_step13.csv"; : >"$t"
for dt in $dtypes; do for d in $ds; do for c in $masks; do for n in $ns; do
  run_step "$t" 13 --b $((16384 / n)) --h $((2048 / d)) --n $n --d $d --dtype $dt $([ $c = 1 ] && echo --causal)
done; done; done; done
python3 "$root/scripts/peers.py" "$out/peers_${slug}_bwd.csv" --backends flash,cudnn --ns "$(target bwd ns)" \
  --ds "$(target bwd ds)" --dtypes "$(target bwd dtypes)" --commit "$commit" \
  || { echo "bwd_target.sh: peers.py failed" >&2; fail=1; }
for d in $ds; do for n in $ns; do
  run_step "$t" 13 --b $((16384 / n)) --h $((2048 / d)) --n $n --d $d --dtype bf16 --deterministic
done; done
f="$out/dropout_${slug}_step12.csv"; : >"$f"
for d in $ds; do
  run_step "$t" 13 --b 4 --h $((2048 / d)) --n 4096 --d $d --dtype bf16 --dropout 0.1
  run_step "$f" 12 --b 4 --h $((2048 / d)) --n 4096 --d $d --dtype bf16
  run_step "$f" 12 --b 4 --h $((2048 / d)) --n 4096 --d $d --dtype bf16 --dropout 0.1
done
exit $fail
