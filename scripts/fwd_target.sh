#!/usr/bin/env bash
# The Hopper steps' forward against PyTorch's FlashAttention-2 (flash) and cuDNN backends, in one run
# on one GPU: FlashAttention's benchmark shapes (B·N = 16k, H·d = 2048) over the forward target matrix
# of scripts/targets.txt ("fwd": N = 1k ... 16k, causal and not, fp16 and bf16; d = 256 is its
# wide_ds), every run checked against the reference (--check-heads 1). FA_FWD_SET picks the set:
#   16 (default; docs/16_pingpong.md): step 16 at d = 64, 128, 256 and steps 14, 15 at d = 256; the
#      peers at d = 64, 128, 256 (forward only); Nsight Compute on steps 15 and 16 at N = 4096 (d = 128,
#      both masks); then step 16's experiments (bench --variants ablations: each --tiles and --ablate
#      choice, fp16, N = 16k, d = 64, 128, 256, both masks)
#   15 (docs/15_tma_warpspec.md): steps 12, 14, 15 at d = 64 and 128, the peers (forward and
#      backward), Nsight on steps 14 and 15
#   scripts/fwd_target.sh OUTDIR     (after a build: FA_BUILD, default build/, must hold the steps and bench)
# Writes into OUTDIR (SUFFIX: fwd for set 15, fwd16 for set 16):
#   target_<gpu>_SUFFIX.csv     date, commit, then stepNN --csv's columns: one row per step and shape
#   peers_<gpu>_SUFFIX.csv      scripts/peers.py --backends flash,cudnn on the same shapes
#   ncu_<gpu>_stepNN.csv        scripts/ncu_ledger.py's rows (tensor pipe, stalls, registers)
#   ablation_<gpu>_step16.csv   (set 16) bench's rows for step 16's experiments
# A failed check is a row with pass = 0, and the script's exit status is 1. FA_NCU=0 skips Nsight.
set -uo pipefail
me=fwd_target.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
source "$root/scripts/targets.sh"       # target, target_words: the matrices of scripts/targets.txt
ds=$(target_words fwd ds) && wide=$(target_words fwd wide_ds) && dtypes=$(target_words fwd dtypes) \
  && masks=$(target_words fwd causal) && ns=$(target_words fwd ns) || exit 2
ns="${FA_NS:-$ns}"
pairs() { local s d; for s in $1; do for d in $2; do printf '%s:%s ' "$s" "$d"; done; done; }  # steps × ds
csv() { echo $* | tr ' ' ','; }
case "${FA_FWD_SET:-16}" in
  15) runs=$(pairs "12 14 15" "$ds"); suffix=fwd; peer_ds=$(csv $ds); peer_flags=""; ncu_steps="14 15" ;;
  16) runs="$(pairs 16 "$ds $wide")$(pairs "14 15" "$wide")"; suffix=fwd16; peer_ds=$(csv $ds $wide); peer_flags="--fwd-only"
      ncu_steps="15 16" ;;
  *) echo "$me: FA_FWD_SET must be 15 or 16 (got ${FA_FWD_SET})" >&2; exit 2 ;;
esac
fail=0
t="$out/target_${slug}_${suffix}.csv"; : >"$t"
total=$(( $(echo $runs | wc -w) * $(echo $dtypes | wc -w) * $(echo $masks | wc -w) * $(echo $ns | wc -w) )); k=0
for run in $runs; do step=${run%%:*}; d=${run##*:}; for dt in $dtypes; do for c in $masks; do for n in $ns; do
  k=$((k + 1))
  res=$("$build/step$step" --backend gpu --csv --reps 10 --check-heads 1 --b $((16384 / n)) --h $((2048 / d)) --n $n --d $d \
        --dtype $dt $([ $c = 1 ] && echo --causal) 2>/dev/null)
  rc=$?
  [ -s "$t" ] || echo "date,commit,$(echo "$res" | head -n1)" >"$t"
  [ -n "$(echo "$res" | sed -n 2p)" ] && echo "$date_utc,$commit,$(echo "$res" | sed -n 2p)" >>"$t"
  [ $rc -eq 0 ] || { echo "fwd_target.sh: step$step $dt d=$d causal=$c N=$n exited $rc" >&2; fail=1; }
  echo "[fwd_target $k/$total] step$step $dt d=$d causal=$c N=$n (rc $rc)" >&2
done; done; done; done
python3 "$root/scripts/peers.py" "$out/peers_${slug}_${suffix}.csv" --backends flash,cudnn --ns "$(csv $ns)" --ds $peer_ds \
  --dtypes "$(csv $dtypes)" $peer_flags --commit "$commit" \
  || { echo "fwd_target.sh: peers.py failed" >&2; fail=1; }

# Nsight Compute (scripts/ncu_profile.sh): every metric ncu_ledger.py lists, the first name of each
# optional one unchecked (--select first), or the required ones alone should ncu refuse that set.
if [ "${FA_NCU:-1}" = 1 ]; then
  for step in $ncu_steps; do
    bash "$root/scripts/ncu_profile.sh" --select first --step "$step" --out "$out/ncu_${slug}_step${step}.csv" \
      --ns 4096 --causal "0 1" --build "$build" --work "$out" --log "$out/ncu.log" --gpu "$gpu" --commit "$commit" \
      --date "$date_utc" --tag fwd_target || { echo "fwd_target.sh: Nsight failed for step$step (see ncu.log)" >&2; fail=1; }
  done
  rm -f "$out/ncu.log"
fi
if [ "${FA_FWD_SET:-16}" = 16 ]; then
  # FA_DEADLINE (seconds since the epoch): the bench stops starting runs in time (its --budget-s).
  left=$(( ${FA_DEADLINE:-$(( $(date +%s) + 900 ))} - $(date +%s) - 10 ))
  "$build/bench" --steps 16 --variants ablations --check-heads 1 --dtypes fp16 --ns 16384 --ds 64,128,256 --causal 0,1 \
    --budget-s $(( left > 1 ? left : 1 )) --commit "$commit" --out "$out/ablation_${slug}_step16.csv" >&2 || { echo "fwd_target.sh: step 16's experiments: a run failed" >&2; fail=1; }
fi
exit $fail
