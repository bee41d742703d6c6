#!/usr/bin/env bash
# The latency term's validation run (docs/model.md, "The prediction for the latency term's validation
# run"), on a machine with a CUDA GPU, in one go:
#   1. build; `bench --peaks` (the ceilings and the latencies a chain waits on) -> latencies_<gpu>.csv;
#   2. `cuobjdump -sass` of step01 … step12 (OUTDIR/sass.tgz) and scripts/sass_profile.py over them
#      -> sass_profile_<gpu>.csv, the profile this run's model reads (FA_SASS_PROFILE);
#   3. scripts/gpu_session.sh without its tests and Nsight: the tour (the model computed in the run,
#      before the timing) and a sweep of steps 02–11 (FA_NS, default N = 1024, 4096, 16384; d = 64 and
#      128; both masks) -> tour_<gpu>.csv, session_<gpu>_stepNN.csv, peaks_<gpu>.csv;
#   4. scripts/ncu_sass.py on each tour kernel of steps 01–11 (Nsight's executed instructions per
#      opcode, and its warp-state samples) -> ncu_sass_<gpu>_tour.csv.
# Then, on any machine: `model --peaks OUTDIR/peaks_<gpu>.csv --runs OUTDIR/tour_<gpu>.csv,... --out …`
# with FA_SASS_PROFILE=OUTDIR/sass_profile_<gpu>.csv re-applies the model to the rows.
# Usage: scripts/latency_check.sh OUTDIR    (a folder of its own: the tour and peaks files it writes
#   have the names of the committed ones in plots/data, whose tables compare against them)
#   FA_STEPS="02 03"   the sweep's steps (default 02 … 11);  FA_NS=1024,4096  its N values
#   FA_LAT_SWEEP=0 FA_LAT_NCU=0   skip the sweep (the tour still runs) / Nsight
#   FA_TOUR_TABLE=1    also print the tour as a table in session.log (a second timed tour; off by default)
#   FA_COMMIT=abc1234  the rows' commit, when the tree has no .git
# Exit status: 0 when every phase ran, else 1 (the log says which failed).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: scripts/latency_check.sh OUTDIR (see the top of this file)" >&2; exit 2; }
out="$(realpath -m "$1")"
mkdir -p "$out"
log="$out/latency_check.log"
: >"$log"
t0=$(date +%s)
say() { printf '[latency_check %4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*" | tee -a "$log" >&2; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu" ] || { say "no GPU visible (nvidia-smi): this script is for a GPU machine"; exit 2; }
command -v cuobjdump >/dev/null || { say "no cuobjdump on PATH (the CUDA toolkit's bin/)"; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/_/g; s/^_//; s/_$//')
export FA_COMMIT="${FA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
say "GPU $gpu, commit $FA_COMMIT"
rc=0

# ---- 1. build, the latencies --------------------------------------------------------------------
source "$root/scripts/setup.sh"
B="$FA_BUILD"
make -C "$B" -j"$FA_JOBS" --no-print-directory >>"$log" 2>&1 || { say "build failed"; tail -n 40 "$log" >&2; exit 1; }
rm -f "$out/latencies_${slug}.csv"
"$B/bench" --peaks --commit "$FA_COMMIT" --out "$out/latencies_${slug}.csv" >>"$log" 2>&1 \
  || { say "bench --peaks failed (see $log)"; exit 1; }

# ---- 2. the listings and their profile ----------------------------------------------------------
sass="$out/sass"
rm -rf "$sass"
mkdir -p "$sass"
files=""
for id in 01 02 03 04 05 06 07 08 09 10 11 12; do
  cuobjdump -sass "$B/step$id" >"$sass/step$id.sass" 2>>"$log" || { say "cuobjdump step$id failed"; rc=1; continue; }
  files="$files${files:+,}$sass/step$id.sass"
done
python3 "$root/scripts/sass_profile.py" --sass "$files" --peaks "$out/latencies_${slug}.csv" \
  --out "$out/sass_profile_${slug}.csv" 2>>"$log" || { say "sass_profile.py failed (see $log)"; exit 1; }
(cd "$out" && tar czf sass.tgz sass && rm -rf sass)
export FA_SASS_PROFILE="$out/sass_profile_${slug}.csv"
say "profile: $(($(wc -l <"$FA_SASS_PROFILE") - 1)) loops -> $(basename "$FA_SASS_PROFILE")"

# ---- 3. the tour and the sweep, the model computed in the run -----------------------------------
sweep=1
[ "${FA_LAT_SWEEP:-1}" = 1 ] || sweep=0
FA_TESTS=0 FA_NCU=0 FA_SWEEP=$sweep FA_TOUR_TABLE="${FA_TOUR_TABLE:-0}" FA_STEPS="${FA_STEPS:-02 03 04 05 06 07 08 09 10 11}" \
  FA_NS="${FA_NS:-1024,4096,16384}" bash "$root/scripts/gpu_session.sh" "$out" 2>>"$log" \
  || { say "gpu_session.sh failed (see $out/session.log)"; rc=1; }

# ---- 4. Nsight: executed instructions per opcode on the tour's kernels --------------------------
if [ "${FA_LAT_NCU:-1}" = 1 ]; then
  ncsv="$out/ncu_sass_${slug}_tour.csv"
  rm -f "$ncsv"
  # The kernels each step runs by default, from the profile (fp16, the tour's d = 128, or not templated on d).
  python3 - "$FA_SASS_PROFILE" >"$out/tour_kernels.txt" <<'EOF'
import csv, sys
seen = []
for r in csv.DictReader(open(sys.argv[1], newline="")):
    if r["loop"] == "-1" and r["dtype"] in ("fp16", "") and r["d"] in ("128", "0") and int(r["step"]) <= 11 \
            and not r["kernel"].startswith("naive_") and (r["step"], r["kernel"]) not in seen:
        seen.append((r["step"], r["kernel"]))
for step, kernel in seen:
    print(step, kernel)
EOF
  while read -r id kernel; do
    say "ncu_sass: step $id, $kernel"
    python3 "$root/scripts/ncu_sass.py" --out "$ncsv" --append --label "step$id tour" --gpu "$gpu" \
      --profile "step${id}_${kernel}" -- "$B/step$id" --backend gpu --reps 1 --warmup 0 --check-heads 1 \
      >>"$log" 2>&1 || { say "  ncu_sass.py failed for step $id $kernel (see $log)"; rc=1; }
  done <"$out/tour_kernels.txt"
fi
say "done (rc $rc)"
exit $rc
