#!/usr/bin/env bash
# Step 21's measurements in one call on a GPU machine (docs/21_fp8.md, "Measured"):
#   scripts/fp8_target.sh OUTDIR        (after a build: FA_BUILD, default build/)
# 1. speed: step 16 in bf16 and step 21 in e4m3 (every --v) on the same shapes in one run,
#    B·N = 16k, N = 1k, 4k, 16k, d = 128 and 256, both masks, kernel time (bench; every kernel of a call
#    summed, the quantize kernels included, each kernel's share in kernels_ms)  -> fp8_<gpu>.csv
# 2. accuracy: one head pair (B = 1, H = 2) at N = 1k and 2k, d = 128 and 256, both masks, FlashAttention-3's
#    inputs (--inputs normal and outliers): step 16 in bf16, and step 21 with each scale and with and
#    without --incoherent; O's RMSE against the unquantized inputs is the raw_rmse column  -> fp8acc_<gpu>.csv
# 3. order ([pv-order], an experiment; run after the speed phase, before the accuracy one): step 21 with --pv overlap
#    and --pv serial (bench --set), every --v, d = 128 and 256, N = 16k (B·N = 16k), no mask  -> fp8order_<gpu>.csv
# 4. ops ([lean-ops], an experiment; only when named in FA_PHASES): step 16 in bf16 as the baseline, then step 21 with
#    --ops plain, lean and fold under each --pv, every --v, d = 128 and 256, N = 16k (B·N = 16k), no mask
#    -> fp8ops_<gpu>.csv
# 5. defaults ([per-d-defaults]; only when named in FA_PHASES): step 16 in bf16 and step 21 at its defaults alone
#    (--v pretransposed, --pv and --ops auto), B·N = 16k, N = 1k, 4k, 16k, d = 128 and 256, both masks
#    -> fp8defaults_<gpu>.csv
# 6. d64 ([sw64]; only when named in FA_PHASES): d = 64 alone — step 16 in bf16 and step 21 at its defaults on the
#    speed phase's shapes -> fp8d64_<gpu>.csv, and the accuracy phase's rows at d = 64 -> fp8d64acc_<gpu>.csv
# 7. loads ([quantize-loads]; only when named in FA_PHASES): this GPU's ceilings (bench --peaks: hbm-read and
#    hbm-write) -> fp8peaks_<gpu>.csv, then step 21 at its defaults alone, d = 64, 128 and 256, N = 1k, 4k and 16k
#    (B·N = 16k), no mask: the quantize kernels' times in kernels_ms -> fp8loads_<gpu>.csv
# FA_PHASES (default "speed accuracy order") picks phases; FA_REPS (default 10) timed reps per speed row. Every
# run is checked; a failed check makes the exit status 1. An unknown phase exits 2 before anything runs.
set -uo pipefail
me=fp8_target.sh
phases=" ${FA_PHASES:-speed accuracy order} "
for ph in $phases; do
  case "$ph" in speed|accuracy|order|ops|defaults|d64|loads) ;; *) echo "$me: FA_PHASES: unknown phase '$ph' (speed, accuracy, order, ops, defaults, d64, loads)" >&2; exit 2 ;; esac
done
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
reps=${FA_REPS:-10}
fail=0
need_programs bench step16 step21
if [[ "$phases" == *" speed "* ]]; then
  echo "[$me $(date -u +%H:%M:%S)] speed: steps 16 (bf16) and 21 (e4m3) -> $out/fp8_${slug}.csv" >&2
  "$build/bench" --steps 16,21 --dtypes bf16,e4m3 --ns 1024,4096,16384 --ds 128,256 --causal 0,1 --variants all \
    --check-heads 1 --reps "$reps" --commit "$commit" --out "$out/fp8_${slug}.csv" >&2 || fail=1
fi
row() {  # row FILE PROGRAM ARGS...: the run's CSV row into FILE (its header once), the check's exit status kept
  local file=$1 text rc
  text=$("$build/$2" "${@:3}" --csv) ; rc=$?
  [ "$rc" -eq 0 ] || { echo "$me: $2 ${*:3}: exit $rc" >&2; fail=1; }
  [ -s "$file" ] || echo "$text" | head -n1 | sed 's/^/date,commit,/' > "$file"
  echo "$text" | tail -n1 | sed "s/^/$date_utc,$commit,/" >> "$file"
}
if [[ "$phases" == *" order "* ]]; then
  ord="$out/fp8order_${slug}.csv"
  echo "[$me $(date -u +%H:%M:%S)] order: --pv overlap and serial, every --v -> $ord" >&2
  rm -f "$ord"
  for pv in overlap serial; do
    "$build/bench" --steps 21 --dtypes e4m3 --ns 16384 --ds 128,256 --causal 0 --variants all --set "pv=$pv" \
      --check-heads 1 --reps "$reps" --commit "$commit" --out "$ord" >&2 || fail=1
  done
fi
if [[ "$phases" == *" ops "* ]]; then
  opsf="$out/fp8ops_${slug}.csv"
  echo "[$me $(date -u +%H:%M:%S)] ops: step 16, then step 21 with --ops plain, lean and fold under each --pv, every --v -> $opsf" >&2
  rm -f "$opsf"
  "$build/bench" --steps 16 --dtypes bf16 --ns 16384 --ds 128,256 --causal 0 \
    --check-heads 1 --reps "$reps" --commit "$commit" --out "$opsf" >&2 || fail=1
  for pv in overlap serial; do
    for ops in plain lean fold; do
      "$build/bench" --steps 21 --dtypes e4m3 --ns 16384 --ds 128,256 --causal 0 --variants all --set "pv=$pv,ops=$ops" \
        --check-heads 1 --reps "$reps" --commit "$commit" --out "$opsf" >&2 || fail=1
    done
  done
fi
if [[ "$phases" == *" defaults "* ]]; then
  dfl="$out/fp8defaults_${slug}.csv"
  echo "[$me $(date -u +%H:%M:%S)] defaults: step 16 (bf16) and step 21 at its defaults -> $dfl" >&2
  rm -f "$dfl"
  "$build/bench" --steps 16,21 --dtypes bf16,e4m3 --ns 1024,4096,16384 --ds 128,256 --causal 0,1 --variants default \
    --check-heads 1 --reps "$reps" --commit "$commit" --out "$dfl" >&2 || fail=1
fi
if [[ "$phases" == *" loads "* ]]; then
  echo "[$me $(date -u +%H:%M:%S)] loads: bench --peaks -> $out/fp8peaks_${slug}.csv; step 21 at its defaults, d = 64, 128, 256 -> $out/fp8loads_${slug}.csv" >&2
  rm -f "$out/fp8peaks_${slug}.csv" "$out/fp8loads_${slug}.csv"
  "$build/bench" --peaks --commit "$commit" --out "$out/fp8peaks_${slug}.csv" >&2 || fail=1
  "$build/bench" --steps 21 --dtypes e4m3 --ns 1024,4096,16384 --ds 64,128,256 --causal 0 --variants default \
    --check-heads 1 --reps "$reps" --commit "$commit" --out "$out/fp8loads_${slug}.csv" >&2 || fail=1
fi
accuracy() {  # accuracy FILE D...: FlashAttention-3's two input protocols, both masks, N = 1k and 2k, at each d
  local acc=$1 inputs d n c scales
  rm -f "$acc"
  for inputs in normal outliers; do
    for d in "${@:2}"; do
      for n in 1024 2048; do
        for c in 0 1; do
          causal=(); [ "$c" = 1 ] && causal=(--causal)
          row "$acc" step16 --dtype bf16 --inputs "$inputs" --d "$d" --n "$n" "${causal[@]}" --b 1 --h 2 --reps 3
          for scales in tensor block; do
            row "$acc" step21 --inputs "$inputs" --d "$d" --n "$n" --fp8-scales "$scales" "${causal[@]}" --b 1 --h 2 --reps 3
            row "$acc" step21 --inputs "$inputs" --d "$d" --n "$n" --fp8-scales "$scales" --incoherent "${causal[@]}" --b 1 --h 2 --reps 3
          done
        done
      done
    done
  done
}
if [[ "$phases" == *" d64 "* ]]; then
  echo "[$me $(date -u +%H:%M:%S)] d64: step 16 (bf16) and step 21 at its defaults, d = 64 -> $out/fp8d64_${slug}.csv" >&2
  rm -f "$out/fp8d64_${slug}.csv"
  "$build/bench" --steps 16,21 --dtypes bf16,e4m3 --ns 1024,4096,16384 --ds 64 --causal 0,1 --variants default \
    --check-heads 1 --reps "$reps" --commit "$commit" --out "$out/fp8d64_${slug}.csv" >&2 || fail=1
  echo "[$me $(date -u +%H:%M:%S)] d64: accuracy at d = 64 -> $out/fp8d64acc_${slug}.csv" >&2
  accuracy "$out/fp8d64acc_${slug}.csv" 64
fi
[[ "$phases" == *" accuracy "* ]] || { echo "[$me $(date -u +%H:%M:%S)] done (exit $fail; no accuracy phase)" >&2; exit $fail; }
echo "[$me $(date -u +%H:%M:%S)] accuracy -> $out/fp8acc_${slug}.csv" >&2
accuracy "$out/fp8acc_${slug}.csv" 128 256
echo "[$me $(date -u +%H:%M:%S)] done (exit $fail): copy the files to plots/data/ and run scripts/doc_tables.py" >&2
exit $fail
