#!/usr/bin/env bash
# One GPU session, start to finish (on a machine with a CUDA GPU; under eight minutes on an H200):
#   1. build everything;  2. the whole test suite, GPU tests included;
#   3. compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on every step at a small shape;
#   4. every step over N = 512 ... 16k on FlashAttention's benchmark shapes (B·N = 16k, H·d = 2048);
#   5. Nsight Compute: bytes requested from global memory, L2 and DRAM bytes, beside the ledger;
#      shared-memory bank conflicts, tensor-pipe use, warp stall reasons, where this ncu offers them.
# Writes, into OUTDIR (default plots/data):
#   session_<gpu>_stepNN.csv   one row per measured run, with date, commit, GPU and CUDA version
#   ncu_<gpu>_stepNN.csv       per kernel: ledger bytes against Nsight's requested / L2 / DRAM bytes,
#                              then the extra metrics (docs/profiling.md reads them)
#   tour_<gpu>.csv             the tour at its default GPU shape
#   session.log, ctest.log, sanitizer.log
# Usage: scripts/gpu_session.sh [OUTDIR]
#   FA_STEPS="step02 step03"  measure only these steps (tests and sanitizers still cover every step)
#   FA_SANITIZE="step05"      run compute-sanitizer on these steps only (default: every step)
#   FA_NCU_STEPS="step05"     profile these steps with Nsight (default: the measured ones)
#   FA_VARIANT=naive          measure only the variants whose flags contain this text
#   FA_NS="1024 4096"         the sweep's N values (default 512 ... 16384)
#   FA_TOUR=0                 skip the tour
#   FA_PEERS=1                also time PyTorch's SDPA backends (scripts/peers.py -> peers_<gpu>.csv)
#   FA_ONLY_NCU=1             build, then Nsight only (no tests, sanitizer, tour or sweep)
#   FA_NCU_NS="4096" FA_NCU_CAUSAL="0"   the shapes Nsight profiles (default N = 1024 4096, both masks)
#   FA_NCU_CHIP=gh100         the chip to list metrics for, should ncu --query-metrics on the device fail
#   FA_BUDGET_S=200           bound on the sweep's wall time; FA_QUICK=1 a smaller sweep
#   FA_COMMIT=abc1234         the commit, when the tree has no .git
#   FA_BUNDLE=1               pack everything written into OUTDIR/session.tgz at the end, even after a
#                             failure or an interrupt (for machines that return only a few files)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-$root/plots/data}")"
mkdir -p "$out"
log="$out/session.log"
: >"$log"
t0=$(date +%s)
if [ "${FA_BUNDLE:-0}" = 1 ]; then
  bundle() { (cd "$out" && files=$(ls | grep -v '^session.tgz$') && tar czf session.tgz $files && rm -f $files); }
  trap bundle EXIT
fi
say() { printf '[session %4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*" | tee -a "$log" >&2; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu" ] || { say "no GPU visible (nvidia-smi): this script is for a GPU machine"; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/_/g; s/^_//; s/_$//')
commit="${FA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
date_utc=$(date -u +%Y-%m-%dT%H:%MZ)
cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
say "GPU $gpu, CUDA $cuda, driver $driver, commit $commit"

# ---- 1. build --------------------------------------------------------------------------------
source "$root/scripts/setup.sh"
say "building"
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory >>"$log" 2>&1 || { say "build failed"; tail -n 40 "$log"; exit 1; }
"$FA_BUILD/step01" --backend gpu --n 64 --reps 0 2>&1 | sed -n '/^device/,/queried)/p' | tee -a "$log" >&2
steps=$(cd "$FA_BUILD" && ls step[0-9][0-9] 2>/dev/null | sort)
measure="${FA_STEPS:-$steps}"
say "steps: $(echo $steps); measured: $(echo $measure)"

# The step's own flag choices as argument lists, one per line ("--gemm wmma", "--gemm cublas"),
# read from its --help; an empty line when it has none.
variants_of() {
  local line flag choices c
  line=$("$FA_BUILD/$1" --help | sed -n 's/^  --\([a-z]*\) \([a-z]*|[a-z|]*\) .*/\1 \2/p' | head -n1)
  if [ -z "$line" ]; then echo ""; return; fi
  flag=${line%% *}; choices=${line#* }
  for c in ${choices//|/ }; do echo "--$flag $c"; done
}

only_ncu=${FA_ONLY_NCU:-0}
test_rc=0
san_fail=0
if [ "$only_ncu" != 1 ]; then
# ---- 2. tests --------------------------------------------------------------------------------
say "test suite"
(cd "$FA_BUILD" && ctest --output-on-failure) >"$out/ctest.log" 2>&1
test_rc=$?
say "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -n1) (rc $test_rc)"
grep -q '(Skipped)' "$out/ctest.log" && say "WARNING: tests were skipped on a GPU machine"

# ---- 3. compute-sanitizer ----------------------------------------------------------------------
say "compute-sanitizer"
: >"$out/sanitizer.log"
san_fail=0
small="--b 2 --h 2 --n 100 --nk 77 --d 64 --causal --reps 1 --warmup 0 --backend gpu"
for st in ${FA_SANITIZE:-$steps}; do
  mapfile -t vars < <(variants_of "$st")
  for tool in memcheck racecheck synccheck initcheck; do
    for v in "${vars[@]}"; do
      # memcheck on every variant; the other tools on our own kernels (every variant but cuBLAS's).
      [ "$tool" != memcheck ] && [[ "$v" == *cublas* ]] && continue
      echo "=== $st $v $tool" >>"$out/sanitizer.log"
      compute-sanitizer --tool "$tool" --error-exitcode 99 "$FA_BUILD/$st" $small $v >>"$out/sanitizer.log" 2>&1
      rc=$?
      summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer.log" | tail -n1)
      say "  $st $v $tool: rc $rc, $summary"
      [ $rc -ne 0 ] && san_fail=1
    done
  done
done

# ---- 4. the tour and the sweep ---------------------------------------------------------------
if [ "${FA_TOUR:-1}" = 1 ]; then
say "tour"
"$FA_BUILD/tour" --csv --reps 10 2>>"$log" | sed "1s/^/date,commit,cuda,driver,/; 2,\$s/^/$date_utc,$commit,$cuda,$driver,/" >"$out/tour_${slug}.csv"
"$FA_BUILD/tour" --reps 10 2>/dev/null | tee -a "$log" >&2
fi
budget=${FA_BUDGET_S:-200}
ns="512 1024 2048 4096 8192 16384"
[ "${FA_QUICK:-0}" = 1 ] && ns="1024 4096"
[ -n "${FA_NS:-}" ] && ns="$FA_NS"
runs=()
for st in $measure; do
  mapfile -t vars < <(variants_of "$st")
  for v in "${vars[@]}"; do
    [ -n "${FA_VARIANT:-}" ] && [[ "$v" != *"$FA_VARIANT"* ]] && continue
    # d = 128 in fp16 with and without the mask, d = 64 in fp16 without it: every N; d = 64 causal
    # at three N; bf16 at d = 128 without the mask at N = 4096 (the storage type changes little).
    for n in $ns; do
      runs+=("$st|$v|128|0|fp16|$n" "$st|$v|128|1|fp16|$n" "$st|$v|64|0|fp16|$n")
      case $n in 1024|4096|16384) runs+=("$st|$v|64|1|fp16|$n") ;; esac
      [ "$n" = 4096 ] && runs+=("$st|$v|128|0|bf16|$n")
    done
  done
done
say "sweep: ${#runs[@]} runs, budget ${budget}s"
sweep_t0=$(date +%s)
for st in $measure; do rm -f "$out/session_${slug}_${st}.csv"; done
done_runs=0
for r in "${runs[@]}"; do
  IFS='|' read -r st v d causal dtype n <<<"$r"
  if [ $(( $(date +%s) - sweep_t0 )) -gt "$budget" ]; then
    say "sweep budget spent: $(( ${#runs[@]} - done_runs )) runs not measured"
    break
  fi
  b=$(( 16384 / n )); h=$(( 2048 / d ))
  reps=10; warm=3
  [ "$n" -ge 8192 ] && { reps=3; warm=1; }  # the slow steps take a second a launch up there
  args=(--b $b --h $h --n $n --d $d --dtype $dtype --reps $reps --warmup $warm --csv --backend gpu)
  [ "$causal" = 1 ] && args+=(--causal)
  res=$("$FA_BUILD/$st" "${args[@]}" $v 2>>"$log")
  rc=$?
  csv="$out/session_${slug}_${st}.csv"
  [ -f "$csv" ] || echo "date,commit,cuda,driver,$(echo "$res" | head -n1)" >"$csv"
  echo "$date_utc,$commit,$cuda,$driver,$(echo "$res" | tail -n1)" >>"$csv"
  done_runs=$((done_runs + 1))
  say "  [$done_runs/${#runs[@]}] $st ${v:-} d=$d causal=$causal $dtype N=$n: rc $rc, $(echo "$res" | tail -n1 | awk -F, '{print $17 " ms, " $19 " TFLOP/s, pass=" $16}')"
done

fi  # FA_ONLY_NCU

# ---- 5. Nsight Compute -------------------------------------------------------------------------
metrics="l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum,l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
# The extras, one column of ncu_<gpu>_stepNN.csv a line (scripts/ncu_ledger.py names the columns);
# where a line has several names separated by '|', the first that this ncu lists is asked for:
#   atomics (reductions), shared-memory bank conflicts, achieved occupancy, registers and shared
#   memory per block (the six asked for since 573f997, checked by name on an H200 with CUDA 13.0);
#   shared-memory bank conflicts and wavefronts by operation (LDS, STS, LDSM = ldmatrix; for LDSM
#   the hardware counter, else the SASS-patched count); the tensor pipe's busy share (HMMA: mma.sync
#   and WMMA); warp stall reasons, warps stalled per issued instruction.
stall_reasons="barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected lg_throttle dispatch_stall no_instruction"
extra_wanted="l1tex__t_bytes_pipe_lsu_mem_global_op_red.sum
l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
sm__warps_active.avg.pct_of_peak_sustained_active
launch__registers_per_thread
launch__shared_mem_per_block_static
launch__shared_mem_per_block_dynamic
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum|smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum|smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active|sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
$(for r in $stall_reasons; do echo "smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done)
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldgsts.sum"
extra_known="l1tex__t_bytes_pipe_lsu_mem_global_op_red.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__shared_mem_per_block_static,launch__shared_mem_per_block_dynamic"

# An unknown name makes ncu refuse the whole list, so ask only for what this ncu lists: once per
# session, `ncu --query-metrics` (CSV or plain; for the profiled device, else every device, else
# the chip FA_NCU_CHIP names, e.g. gh100) gives the base names (before the first '.', the rollup
# and suffix such as .sum or .avg.pct_of_peak_sustained_active). The list lives in a file and is
# searched with grep on that file: piping a long list into `grep -q` under pipefail reads as
# "not found" whenever grep stops early (that is why the check of aa3d7d6 never matched).
ncu_names="$FA_BUILD/ncu_metric_names.txt"
: >"$ncu_names"
if [ -n "${FA_NCU_STEPS:-$measure}" ]; then
  queries=("--csv --devices 0" "--devices 0" "--csv" "")
  [ -n "${FA_NCU_CHIP:-}" ] && queries+=("--csv --chips $FA_NCU_CHIP" "--chips $FA_NCU_CHIP")
  for q in "${queries[@]}"; do
    ncu --query-metrics $q >"$FA_BUILD/ncu_query.txt" 2>>"$log"
    rc=$?
    awk 'match($0, /[a-z][a-z0-9]*__[A-Za-z0-9_]+/) { print substr($0, RSTART, RLENGTH) }' "$FA_BUILD/ncu_query.txt" \
      | sort -u >"$ncu_names"
    # A real list has thousands of names; an error or help text has none or a few.
    if [ $rc -eq 0 ] && [ "$(wc -l <"$ncu_names")" -ge 100 ]; then
      say "ncu --query-metrics $q: $(wc -l <"$ncu_names") base metric names"
      break
    fi
    : >"$ncu_names"
  done
  [ -s "$ncu_names" ] || say "ncu --query-metrics gave no list (see session.log): asking for every extra, unchecked"
fi
extra=""
n_wanted=0
n_dropped=0
while IFS= read -r alts; do
  [ -n "$alts" ] || continue
  n_wanted=$((n_wanted + 1))
  pick=""
  if [ -s "$ncu_names" ]; then
    for m in ${alts//|/ }; do
      # launch__* are launch attributes, not counters: --query-metrics need not list them.
      if [[ $m == launch__* ]] || grep -qxF -- "${m%%.*}" "$ncu_names"; then pick=$m; break; fi
    done
  else
    pick=${alts%%|*}
  fi
  if [ -z "$pick" ]; then
    say "ncu: ${alts//|/ or } not offered here, not collected"
    n_dropped=$((n_dropped + 1))
    continue
  fi
  [ "$pick" != "${alts%%|*}" ] && say "ncu: ${alts%%|*} not offered here; $pick instead"
  extra="${extra:+$extra,}$pick"
done <<<"$extra_wanted"
[ -s "$ncu_names" ] && say "ncu: $((n_wanted - n_dropped)) of $n_wanted extra metrics offered"
# The metric lists each profile tries in turn: the extras, the six known ones, the bytes alone.
# When a later list works where an earlier one was refused, the session keeps to the later one.
sets=() labels=()
[ -n "$extra" ] && { sets+=("$metrics,$extra"); labels+=("bytes and extras"); }
[ "$extra" != "$extra_known" ] && { sets+=("$metrics,$extra_known"); labels+=("bytes and the six known extras"); }
sets+=("$metrics"); labels+=("bytes only")
for st in ${FA_NCU_STEPS:-$measure}; do
  ncsv="$out/ncu_${slug}_${st}.csv"
  rm -f "$ncsv"
  header=1
  mapfile -t vars < <(variants_of "$st")
  for v in "${vars[@]}"; do
    for n in ${FA_NCU_NS:-1024 4096}; do
      for causal in ${FA_NCU_CAUSAL:-0 1}; do
        b=$(( 16384 / n )); h=16; d=128
        args=(--b $b --h $h --n $n --d $d --reps 0 --backend gpu --ledger-csv "$FA_BUILD/ledger.csv")
        [ "$causal" = 1 ] && args+=(--causal)
        got=""
        for i in "${!sets[@]}"; do
          rm -f "$FA_BUILD/ncu_raw.csv"
          ncu --clock-control none --csv --print-units base --metrics "${sets[$i]}" --log-file "$FA_BUILD/ncu_raw.csv" \
            "$FA_BUILD/$st" "${args[@]}" $v >>"$log" 2>&1
          rc=$?
          if [ $rc -eq 0 ] && grep -q '"ID"' "$FA_BUILD/ncu_raw.csv" 2>/dev/null; then got=$i; break; fi
          [ $((i + 1)) -lt ${#sets[@]} ] && say "  ncu refused or failed with ${labels[$i]} (rc $rc); trying ${labels[$((i + 1))]}"
        done
        if [ -z "$got" ]; then
          say "  ncu $st $v N=$n causal=$causal failed (rc $rc); see session.log"
          cat "$FA_BUILD/ncu_raw.csv" >>"$log" 2>/dev/null
          continue
        fi
        if [ "$got" -gt 0 ]; then
          say "  ncu: ${labels[$got]} from now on"
          sets=("${sets[@]:$got}") labels=("${labels[@]:$got}")
        fi
        HEADER=$header python3 "$root/scripts/ncu_ledger.py" "$FA_BUILD/ncu_raw.csv" "$FA_BUILD/ledger.csv" "${st}_" \
          date="$date_utc" commit="$commit" gpu="$gpu" step="${st#step}" variant="$(echo "${v:--}" | sed "s/^--\([a-z]*\) /\1=/")" B=$b H=$h N=$n d=$d causal=$causal \
          >>"$ncsv" 2>>"$log" && header=0
        say "  ncu $st $v N=$n causal=$causal: done"
      done
    done
  done
done

# ---- 6. peers: PyTorch's SDPA backends on the same shapes -----------------------------------------
if [ "${FA_PEERS:-0}" = 1 ]; then
  say "peers: PyTorch SDPA"
  FA_COMMIT="$commit" python3 "$root/scripts/peers.py" "$out/peers_${slug}.csv" 2>>"$log" || say "peers.py failed (see session.log)"
  say "peers: $(( $(wc -l <"$out/peers_${slug}.csv" 2>/dev/null || echo 1) - 1 )) rows"
fi

if [ "$only_ncu" = 1 ]; then
  say "finished in $(( $(date +%s) - t0 ))s: Nsight only (no tests or sanitizer ran)"
else
  say "finished in $(( $(date +%s) - t0 ))s: tests rc $test_rc, sanitizer $([ $san_fail = 0 ] && echo clean || echo ERRORS)"
fi
[ $test_rc -eq 0 ] && [ $san_fail -eq 0 ]
