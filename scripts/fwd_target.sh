#!/usr/bin/env bash
# The Hopper steps' forward against PyTorch's FlashAttention-2 (flash) and cuDNN backends, in one run
# on one GPU (docs/15_tma_warpspec.md, "Measured"): FlashAttention's benchmark shapes (B·N = 16k,
# H·d = 2048), N = 1k ... 16k, d = 64 and 128, causal and not, fp16 and bf16; steps 12, 14 and 15
# side by side; then Nsight Compute on steps 14 and 15 at N = 4096 (d = 128, both masks).
#   scripts/fwd_target.sh OUTDIR     (after a build: FA_BUILD, default build/, must hold step12, step14, step15)
# Writes into OUTDIR:
#   target_<gpu>_fwd.csv        date, commit, then stepNN --csv's columns: one row per step and shape
#   peers_<gpu>_fwd.csv         scripts/peers.py --backends flash,cudnn on the same shapes
#   ncu_<gpu>_step14.csv, ncu_<gpu>_step15.csv   scripts/ncu_ledger.py's rows (tensor pipe, stalls, registers)
# Every run is checked against the reference (--check-heads 1); a failed check is a row with
# pass = 0, and the script's exit status is 1. FA_NCU=0 skips Nsight.
set -uo pipefail
me=fwd_target.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
ns="${FA_NS:-1024 2048 4096 8192 16384}"
fail=0
t="$out/target_${slug}_fwd.csv"; : >"$t"
total=$(( 3 * 2 * 2 * 2 * $(echo $ns | wc -w) )); k=0
for step in 12 14 15; do for dt in bf16 fp16; do for d in 64 128; do for c in 0 1; do for n in $ns; do
  k=$((k + 1))
  res=$("$build/step$step" --backend gpu --csv --reps 10 --check-heads 1 --b $((16384 / n)) --h $((2048 / d)) --n $n --d $d \
        --dtype $dt $([ $c = 1 ] && echo --causal) 2>/dev/null)
  rc=$?
  [ -s "$t" ] || echo "date,commit,$(echo "$res" | head -n1)" >"$t"
  [ -n "$(echo "$res" | sed -n 2p)" ] && echo "$date_utc,$commit,$(echo "$res" | sed -n 2p)" >>"$t"
  [ $rc -eq 0 ] || { echo "fwd_target.sh: step$step $dt d=$d causal=$c N=$n exited $rc" >&2; fail=1; }
  echo "[fwd_target $k/$total] step$step $dt d=$d causal=$c N=$n (rc $rc)" >&2
done; done; done; done; done
python3 "$root/scripts/peers.py" "$out/peers_${slug}_fwd.csv" --backends flash,cudnn --ns "$(echo $ns | tr ' ' ',')" --commit "$commit" \
  || { echo "fwd_target.sh: peers.py failed" >&2; fail=1; }

# Nsight Compute: every metric ncu_ledger.py lists (the first name of each optional one), or the
# required ones alone should ncu refuse that set.
if [ "${FA_NCU:-1}" = 1 ]; then
  required="" optional=""
  while read -r kind alts; do
    m=${alts%%|*}
    if [ "$kind" = required ]; then required="${required:+$required,}$m"; else optional="${optional:+$optional,}$m"; fi
  done < <(python3 "$root/scripts/ncu_ledger.py" --metrics)
  for step in 14 15; do
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
exit $fail
