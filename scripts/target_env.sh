# Shared set-up of scripts/fwd_target.sh and scripts/bwd_target.sh — source it after setting `me` (the
# script's name): the output folder from the script's first argument, the build (FA_BUILD, default
# build/), the GPU's name and its file-name slug ("h200"), the commit (FA_COMMIT, else git) and the
# date; run_step, one checked run of a step program into a CSV. Without a visible GPU the script exits 2.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -n "${1:-}" ] || { echo "usage: scripts/$me OUTDIR" >&2; exit 2; }
out="$(realpath -m "$1")"
build="${FA_BUILD:-$root/build}"
mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu" ] || { echo "$me: no GPU visible (nvidia-smi)" >&2; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/_/g; s/^_//; s/_$//')
commit="${FA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
date_utc=$(date -u +%Y-%m-%dT%H:%MZ)
# need_programs PROG...: each one built in $build, else exit 2 saying how to build it.
need_programs() {
  local p
  for p in "$@"; do
    [ -x "$build/$p" ] || { echo "$me: no $build/$p: build first (scripts/setup.sh, then make -C $build)" >&2; exit 2; }
  done
}
# run_step CSV STEP ARGS...: one checked GPU run of $build/stepSTEP with ARGS (--csv, 10 reps, the check on one
# head: --check-heads 1 keeps the CPU side of a long run short), its row appended to CSV after the date and
# the commit (the header once). A nonzero exit status is reported and sets fail=1.
run_step() {
  local csv=$1 step=$2; shift 2
  local res; res=$("$build/step$step" --backend gpu --csv --reps 10 --check-heads 1 "$@" 2>/dev/null)
  local rc=$?
  [ -s "$csv" ] || echo "date,commit,$(echo "$res" | head -n1)" >"$csv"
  if [ -n "$(echo "$res" | sed -n 2p)" ]; then echo "$date_utc,$commit,$(echo "$res" | sed -n 2p)" >>"$csv"; fi
  [ $rc -eq 0 ] || { echo "$me: step$step $* exited $rc" >&2; fail=1; }
  echo "[$me] step$step $* (rc $rc)" >&2
}
