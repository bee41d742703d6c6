#!/usr/bin/env bash
# One GPU session, start to finish (on a machine with a CUDA GPU): a thin driver over the project's
# own programs — the build, ctest, compute-sanitizer, the tour, `bench` (the sweeps), Nsight Compute
# through scripts/ncu_profile.sh and scripts/ncu_ledger.py (which holds the metric list), and
# scripts/peers.py. How to run it, and what to bring back: docs/gpu_session.md.
#   1. build everything;  2-3. scripts/gpu_check.sh over the whole test suite (GPU tests included)
#      and compute-sanitizer on every step (memcheck on every variant, racecheck, synccheck and
#      initcheck on each default, a small decode for a decoding step);
#   4. the GPU's measured ceilings (`bench --peaks`: HBM, L2, shared memory, tensor cores, FMA,
#      ex2, barriers, atomics, latencies, launch), the tour, and every step over N = 512 ... 16k on
#      FlashAttention's benchmark shapes (B·N = 16k, H·d = 2048) with `bench`;
#   5. Nsight Compute: bytes requested from global memory, L2 and DRAM bytes, beside the ledger;
#      shared-memory bank conflicts, tensor-pipe use, warp stall reasons, where this ncu offers them;
#   6. optionally: step 12's ablations, the FlashAttention-2 target matrix (scripts/targets.txt, "fwd"),
#      PyTorch's SDPA peers.
# Writes, into OUTDIR (default plots/data):
#   session_<gpu>_stepNN.csv   bench's rows for one step (date, commit, CUDA versions, then the
#                              step program's --csv columns)
#   ncu_<gpu>_stepNN.csv       per kernel: ledger bytes against Nsight's requested / L2 / DRAM bytes,
#                              then the extra metrics (docs/profiling.md reads them)
#   peaks_<gpu>.csv            bench --peaks: one row per measured ceiling (date, commit, CUDA versions,
#                              device, peak, unit, value, amount, reps, ms; docs/profiling.md)
#   tour_<gpu>.csv             the tour at its default GPU shape
#   ablation_<gpu>_step12.csv  FA_ABLATIONS=1: step 12 with each of its changes taken out
#   bench_<gpu>_step12.csv     FA_TARGET=1: step 12 over the FlashAttention-2 target matrix
#   peers_<gpu>.csv            FA_PEERS=1: PyTorch SDPA's backends on the same shapes
#   session.log; check/: gpu_check.txt, ctest_gpu.log (the whole suite here), sanitizer.log
# Usage: scripts/gpu_session.sh [OUTDIR]
#   FA_STEPS="02 03"          measure only these steps (ids; tests and sanitizers still cover every step)
#   FA_SANITIZE="05"          run compute-sanitizer on these steps only (default: every step; gpu_check.sh)
#   FA_NCU_STEPS="05"         profile these steps with Nsight (default: the measured ones)
#   FA_NS="1024,4096"         the sweep's N values (default 512 ... 16384)
#   FA_TOUR=0  FA_TESTS=0  FA_SWEEP=0  FA_NCU=0   skip the tour / the tests and sanitizer / the
#                             sweep / Nsight
#   FA_TOUR_TABLE=0           skip the tour's second run, the table for the log (the CSV has its rows)
#   FA_NCU_NS="4096" FA_NCU_CAUSAL="0"  the shapes Nsight profiles (default N = 1024 4096, both masks)
#   FA_NCU_CHIP=gh100         the chip to list metrics for, should ncu --query-metrics on the device fail
#   FA_BUDGET_S=200           bound on each bench call's wall time (bench resumes on a second call)
#   FA_RUNS=3                 timed runs per row of the tour and the sweeps (their spread goes in the CSV)
#   FA_ABLATIONS=1 FA_TARGET=1 FA_PEERS=1   the optional measurements of step 6
#   FA_ABLATION_STEPS="12 13" whose ablations (bench --variants ablations) FA_ABLATIONS runs (default 12)
#   FA_BWD_TARGET=1           scripts/bwd_target.sh: step 13's backward beside flash and cuDNN in one run
#   FA_FWD_TARGET=1           scripts/fwd_target.sh: steps 12, 14, 15's forward beside flash and cuDNN in one
#                             run, then Nsight on 14 and 15 (an sm_90 GPU: elsewhere 14 and 15 refuse)
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
  bundle() { (cd "$out" && files=$(ls | grep -v '^session.tgz$') && tar czf session.tgz $files && rm -rf $files); }
  trap bundle EXIT
fi
say() { printf '[session %4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*" | tee -a "$log" >&2; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu" ] || { say "no GPU visible (nvidia-smi): this script is for a GPU machine"; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/_/g; s/^_//; s/_$//')
commit="${FA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
export FA_COMMIT="$commit"
date_utc=$(date -u +%Y-%m-%dT%H:%MZ)
cuda=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
say "GPU $gpu, CUDA $cuda, driver $driver, commit $commit"

# ---- 1. build --------------------------------------------------------------------------------
source "$root/scripts/setup.sh"
say "building"
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory >>"$log" 2>&1 || { say "build failed"; tail -n 40 "$log"; exit 1; }
B="$FA_BUILD"
"$B/step01" --backend gpu --n 64 --reps 0 2>&1 | sed -n '/^device/,/queried)/p' | tee -a "$log" >&2
all_ids=$("$B/bench" --list | awk '{print substr($1, 5)}' | sort -u | tr '\n' ' ')
measure="${FA_STEPS:-$all_ids}"
say "steps: $all_ids; measured: $measure"
csv_list() { echo "$*" | tr ' ' ','; }

test_rc=0
if [ "${FA_TESTS:-1}" = 1 ]; then
# ---- 2-3. the whole suite and compute-sanitizer on every step: scripts/gpu_check.sh, the one place
# that does both (its build is a no-op after step 1). Its logs go to OUTDIR/check/.
say "tests and compute-sanitizer: scripts/gpu_check.sh over the whole suite"
FA_CTEST_ARGS="" bash "$root/scripts/gpu_check.sh" "$out/check" 2>>"$log"
test_rc=$?
say "gpu_check: $(tail -n1 "$out/check/gpu_check.txt" 2>/dev/null) (rc $test_rc; $out/check/gpu_check.txt)"
fi

# ---- 4. the ceilings, the tour and the sweep -------------------------------------------------
# The measured ceilings first, on a GPU nothing else has warmed: what the model divides by.
say "peaks"
rm -f "$out/peaks_${slug}.csv"
"$B/bench" --peaks --commit "$commit" --out "$out/peaks_${slug}.csv" 2>&1 | tee -a "$log" | grep -E '^bench: ' >&2 \
  || say "bench --peaks failed (see $log)"
# [model] Every prediction below (the tour's, the sweep's) divides by these ceilings, from this run.
[ -s "$out/peaks_${slug}.csv" ] && export FA_PEAKS="$out/peaks_${slug}.csv"
if [ "${FA_TOUR:-1}" = 1 ]; then
  say "tour"
  # [noise] Three timed runs per step: the table shows their spread.
  "$B/tour" --csv --runs 3 --reps 10 2>>"$log" | sed "1s/^/date,commit,cuda,driver,/; 2,\$s/^/$date_utc,$commit,$cuda,$driver,/" >"$out/tour_${slug}.csv"
  # The same tour again as a table for the log (it times every pass again: FA_TOUR_TABLE=0 skips it)
  [ "${FA_TOUR_TABLE:-1}" = 1 ] && "$B/tour" --reps 10 2>/dev/null | tee -a "$log" >&2
fi
budget=${FA_BUDGET_S:-200}
ns="${FA_NS:-512,1024,2048,4096,8192,16384}"
# [noise] FA_RUNS timed runs per row (default 3): the tables show their spread.
bench() { "$B/bench" --budget-s "$budget" --runs "${FA_RUNS:-3}" --commit "$commit" "$@" 2>&1 | tee -a "$log" | grep -E '^bench: ' >&2; }
if [ "${FA_SWEEP:-1}" = 1 ]; then
  for id in $measure; do
    csv="$out/session_${slug}_step${id}.csv"
    rm -f "$csv"
    say "sweep: step $id -> $(basename "$csv")"
    # d = 128 in fp16 with and without the mask, d = 64 in fp16 without it: every N; d = 64 causal
    # at three N; bf16 at d = 128 without the mask at N = 4096 (the storage type changes little).
    bench --steps "$id" --out "$csv" --ns "$ns" --ds 128 --causal 0,1
    bench --steps "$id" --out "$csv" --ns "$ns" --ds 64 --causal 0
    bench --steps "$id" --out "$csv" --ns 1024,4096,16384 --ds 64 --causal 1
    bench --steps "$id" --out "$csv" --ns 4096 --ds 128 --causal 0 --dtypes bf16
  done
fi

# ---- 5. Nsight Compute -------------------------------------------------------------------------
# scripts/ncu_profile.sh, every variant of each step (bench --list): the metrics of scripts/ncu_ledger.py
# --metrics, of each optional one the first name this ncu offers (--select offered: `ncu --query-metrics`
# for the device, else every device, else the chip FA_NCU_CHIP names; an unknown name would make ncu
# refuse the whole list), the required ones alone should ncu refuse the set anyway.
ncu_steps="${FA_NCU_STEPS:-$measure}"
[ "${FA_NCU:-1}" = 1 ] || ncu_steps=""
rm -f "$B/ncu_metric_names.txt"  # query this ncu afresh, once for the session (ncu_profile.sh keeps the list)
for id in $ncu_steps; do
  say "ncu: step $id"
  bash "$root/scripts/ncu_profile.sh" --select offered --step "$id" --variants all --out "$out/ncu_${slug}_step${id}.csv" \
    --ns "${FA_NCU_NS:-1024 4096}" --causal "${FA_NCU_CAUSAL:-0 1}" --build "$B" --work "$B" --log "$log" --gpu "$gpu" \
    --commit "$commit" --date "$date_utc" --tag "session ncu" 2> >(tee -a "$log" >&2) \
    || say "  ncu: a profile of step $id failed (see session.log)"
done

# ---- 6. step 12's ablations, the FlashAttention-2 target, the peers --------------------------------
if [ "${FA_ABLATIONS:-0}" = 1 ]; then
  for id in ${FA_ABLATION_STEPS:-12}; do
    say "ablations: step $id, each experiment alone (fp16, d = 64 and 128, both masks)"
    rm -f "$out/ablation_${slug}_step${id}.csv"
    bench --steps "$id" --variants ablations --check-heads 1 --out "$out/ablation_${slug}_step${id}.csv" --ns 1024,4096,16384 --ds 64,128 --causal 0,1
  done
fi
if [ "${FA_BWD_TARGET:-0}" = 1 ]; then
  say "target: step 13's backward beside flash and cuDNN (scripts/bwd_target.sh)"
  FA_BUILD="$B" FA_COMMIT="$commit" bash "$root/scripts/bwd_target.sh" "$out" 2>>"$log" || say "bwd_target.sh: a check failed or a run broke (see session.log)"
fi
if [ "${FA_FWD_TARGET:-0}" = 1 ]; then
  say "target: the Hopper steps' forward beside flash and cuDNN (scripts/fwd_target.sh)"
  FA_BUILD="$B" FA_COMMIT="$commit" bash "$root/scripts/fwd_target.sh" "$out" 2>>"$log" || say "fwd_target.sh: a check failed or a run broke (see session.log)"
fi
if [ "${FA_TARGET:-0}" = 1 ]; then
  source "$root/scripts/targets.sh"  # the forward target matrix of scripts/targets.txt
  say "target: step 12 over the forward target matrix (N = $(target fwd ns), d = $(target fwd ds), dtypes $(target fwd dtypes))"
  rm -f "$out/bench_${slug}_step12.csv"
  bench --steps 12 --out "$out/bench_${slug}_step12.csv" --ns "$(target fwd ns)" --ds "$(target fwd ds)" \
    --causal "$(target fwd causal)" --dtypes "$(target fwd dtypes)"
fi
if [ "${FA_PEERS:-0}" = 1 ]; then
  say "peers: PyTorch SDPA"
  python3 "$root/scripts/peers.py" "$out/peers_${slug}.csv" 2>>"$log" || say "peers.py failed (see session.log)"
  say "peers: $(( $(wc -l <"$out/peers_${slug}.csv" 2>/dev/null || echo 1) - 1 )) rows"
fi

if [ "${FA_TESTS:-1}" = 1 ]; then
  say "finished in $(( $(date +%s) - t0 ))s: tests and sanitizer $([ $test_rc = 0 ] && echo PASS || echo FAIL) (check/gpu_check.txt)"
else
  say "finished in $(( $(date +%s) - t0 ))s: FA_TESTS=0, no tests or sanitizer ran"
fi
[ $test_rc -eq 0 ]
