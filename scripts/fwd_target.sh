#!/usr/bin/env bash
# The Hopper steps' forward against PyTorch's FlashAttention-2 (flash) and cuDNN backends, in one run
# on one GPU: FlashAttention's benchmark shapes (B·N = 16k, H·d = 2048), N = 1k ... 16k, causal and
# not, fp16 and bf16, every run checked against the reference (--check-heads 1). FA_FWD_SET picks the
# set:
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
ns="${FA_NS:-1024 2048 4096 8192 16384}"
case "${FA_FWD_SET:-16}" in
  15) runs="12:64 12:128 14:64 14:128 15:64 15:128"; suffix=fwd; peer_ds=64,128; peer_flags=""; ncu_steps="14 15" ;;
  16) runs="16:64 16:128 16:256 14:256 15:256"; suffix=fwd16; peer_ds=64,128,256; peer_flags="--fwd-only"; ncu_steps="15 16" ;;
  *) echo "$me: FA_FWD_SET must be 15 or 16 (got ${FA_FWD_SET})" >&2; exit 2 ;;
esac
fail=0
t="$out/target_${slug}_${suffix}.csv"; : >"$t"
total=$(( $(echo $runs | wc -w) * 2 * 2 * $(echo $ns | wc -w) )); k=0
for run in $runs; do step=${run%%:*}; d=${run##*:}; for dt in bf16 fp16; do for c in 0 1; do for n in $ns; do
  k=$((k + 1))
  res=$("$build/step$step" --backend gpu --csv --reps 10 --check-heads 1 --b $((16384 / n)) --h $((2048 / d)) --n $n --d $d \
        --dtype $dt $([ $c = 1 ] && echo --causal) 2>/dev/null)
  rc=$?
  [ -s "$t" ] || echo "date,commit,$(echo "$res" | head -n1)" >"$t"
  [ -n "$(echo "$res" | sed -n 2p)" ] && echo "$date_utc,$commit,$(echo "$res" | sed -n 2p)" >>"$t"
  [ $rc -eq 0 ] || { echo "fwd_target.sh: step$step $dt d=$d causal=$c N=$n exited $rc" >&2; fail=1; }
  echo "[fwd_target $k/$total] step$step $dt d=$d causal=$c N=$n (rc $rc)" >&2
done; done; done; done
python3 "$root/scripts/peers.py" "$out/peers_${slug}_${suffix}.csv" --backends flash,cudnn --ns "$(echo $ns | tr ' ' ',')" --ds $peer_ds \
  $peer_flags --commit "$commit" \
  || { echo "fwd_target.sh: peers.py failed" >&2; fail=1; }

# Nsight Compute: every metric ncu_ledger.py lists (the first name of each optional one), or the
# required ones alone should ncu refuse that set.
if [ "${FA_NCU:-1}" = 1 ]; then
  required="" optional=""
  while read -r kind alts; do
    m=${alts%%|*}
    if [ "$kind" = required ]; then required="${required:+$required,}$m"; else optional="${optional:+$optional,}$m"; fi
  done < <(python3 "$root/scripts/ncu_ledger.py" --metrics)
  for step in $ncu_steps; do
    ncsv="$out/ncu_${slug}_step${step}.csv"; rm -f "$ncsv"; header=1
    for c in 0 1; do
      args=(--b 4 --h 16 --n 4096 --d 128 --reps 0 --backend gpu --ledger-csv "$out/ledger.csv")
      [ $c = 1 ] && args+=(--causal)
      for set in "$required,$optional" "$required"; do
        rm -f "$out/ncu_raw.csv"
        ncu --clock-control none --csv --print-units base --metrics "$set" --log-file "$out/ncu_raw.csv" "$build/step$step" "${args[@]}" \
          >"$out/ncu.log" 2>&1 && grep -q '"ID"' "$out/ncu_raw.csv" && break
        echo "fwd_target.sh: ncu refused a metric set for step$step (see ncu.log); trying the required ones" >&2
      done
      HEADER=$header python3 "$root/scripts/ncu_ledger.py" "$out/ncu_raw.csv" "$out/ledger.csv" "step${step}_" \
        date="$date_utc" commit="$commit" gpu="$gpu" step="$step" variant=- B=4 H=16 N=4096 d=128 causal=$c >>"$ncsv" \
        && header=0 || { echo "fwd_target.sh: ncu_ledger.py failed for step$step causal=$c" >&2; fail=1; }
      echo "[fwd_target] ncu step$step causal=$c" >&2
    done
  done
  rm -f "$out/ncu_raw.csv" "$out/ledger.csv" "$out/ncu.log"
fi
if [ "${FA_FWD_SET:-16}" = 16 ]; then
  # FA_DEADLINE (seconds since the epoch): the bench stops starting runs in time (its --budget-s).
  left=$(( ${FA_DEADLINE:-$(( $(date +%s) + 900 ))} - $(date +%s) - 10 ))
  "$build/bench" --steps 16 --variants ablations --check-heads 1 --dtypes fp16 --ns 16384 --ds 64,128,256 --causal 0,1 \
    --budget-s $(( left > 1 ? left : 1 )) --commit "$commit" --out "$out/ablation_${slug}_step16.csv" >&2 || { echo "fwd_target.sh: step 16's experiments: a run failed" >&2; fail=1; }
fi
exit $fail
