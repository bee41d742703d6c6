#!/usr/bin/env bash
# Nsight Compute over one step's kernels, each profile set beside the step's ledger by
# scripts/ncu_ledger.py (which holds the metric list): the one Nsight loop of scripts/gpu_session.sh and
# scripts/fwd_target.sh.
#   scripts/ncu_profile.sh --select offered|first --step ID --out CSV [options]
# --select: which name of each metric to ask for. `ncu_ledger.py --metrics` prints "required NAME" or
#   "optional NAME|NAME..." (the same quantity under another name on another ncu or GPU); an unknown
#   name makes ncu refuse the whole list, so
#     offered  asks for the first name `ncu --query-metrics` lists (for device 0, else every device, else
#              the chip --chip names); a metric none of whose names is offered is not collected
#     first    asks for the first name of each, unchecked
#   Should ncu refuse the full list anyway, the required metrics alone are asked for, for this and
#   every later profile of the call.
# Options:
#   --build DIR        holds stepNN and bench (default: FA_BUILD, else build/)
#   --ns "1024 4096"   the N values (default "1024 4096"); B = 16384 / N, H = 16, d = 128
#   --causal "0 1"     the masks (default both)
#   --variants all     every variant `bench --list --steps ID` gives (default: the step's default alone)
#   --work DIR         scratch files, and the cached --query-metrics list (default: the build)
#   --log FILE         ncu's own output, appended (default WORK/ncu.log)
#   --gpu, --commit, --date   the rows' leading columns (default: nvidia-smi's name, FA_COMMIT, now)
#   --chip CHIP        the chip to list metrics for, should --query-metrics on the device fail
#   --tag NAME         the prefix of its progress lines on stderr (default ncu_profile)
# Writes CSV afresh: ncu_ledger.py's header, then one row per kernel, profile after profile. Exit status:
# 0 when every profile gave its rows, 1 when one did not (the others are still written), 2 a bad argument.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
select="" step="" out="" build="${FA_BUILD:-$root/build}" ns="1024 4096" masks="0 1" variants=default
work="" log="" gpu="" commit="${FA_COMMIT:-}" date_utc="" chip="${FA_NCU_CHIP:-}" tag=ncu_profile
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in -h|--help) usage ;; esac
  [ $# -ge 2 ] || { echo "ncu_profile.sh: $1 needs a value" >&2; exit 2; }
  case $1 in
    --select) select=$2 ;; --step) step=$2 ;; --out) out=$2 ;; --build) build=$2 ;; --ns) ns=$2 ;;
    --causal) masks=$2 ;; --variants) variants=$2 ;; --work) work=$2 ;; --log) log=$2 ;; --gpu) gpu=$2 ;;
    --commit) commit=$2 ;; --date) date_utc=$2 ;; --chip) chip=$2 ;; --tag) tag=$2 ;;
    *) echo "ncu_profile.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift 2
done
[[ "$select" == offered || "$select" == first ]] || { echo "ncu_profile.sh: --select offered or first" >&2; exit 2; }
[ -n "$step" ] && [ -n "$out" ] || { echo "ncu_profile.sh: --step and --out are required" >&2; exit 2; }
[[ "$variants" == all || "$variants" == default ]] || { echo "ncu_profile.sh: --variants all or default" >&2; exit 2; }
work="${work:-$build}"; log="${log:-$work/ncu.log}"; mkdir -p "$work"
[ -n "$gpu" ] || gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$commit" ] || commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$date_utc" ] || date_utc=$(date -u +%Y-%m-%dT%H:%MZ)
say() { echo "[$tag] $*" >&2; }
command -v ncu >/dev/null || { say "ncu is not on PATH: no Nsight rows for step $step"; exit 1; }

# ---- the metric list ------------------------------------------------------------------------------
names="$work/ncu_metric_names.txt"  # the base names this ncu offers (kept for the next call)
if [ "$select" = offered ] && [ ! -s "$names" ]; then
  queries=("--csv --devices 0" "--devices 0" "--csv" "")
  [ -n "$chip" ] && queries+=("--csv --chips $chip" "--chips $chip")
  for q in "${queries[@]}"; do
    ncu --query-metrics $q >"$work/ncu_query.txt" 2>>"$log"
    rc=$?
    awk 'match($0, /[a-z][a-z0-9]*__[A-Za-z0-9_]+/) { print substr($0, RSTART, RLENGTH) }' "$work/ncu_query.txt" | sort -u >"$names"
    if [ $rc -eq 0 ] && [ "$(wc -l <"$names")" -ge 100 ]; then say "ncu --query-metrics $q: $(wc -l <"$names") base names"; break; fi
    : >"$names"
  done
  rm -f "$work/ncu_query.txt"
  [ -s "$names" ] || say "ncu --query-metrics gave no list (see $log): asking for every metric's first name, unchecked"
fi
required="" optional=""
while read -r kind alts; do
  pick=""
  for m in ${alts//|/ }; do
    # launch__* are launch attributes, not counters: --query-metrics need not list them.
    if [ "$select" = first ] || [ ! -s "$names" ] || [[ $m == launch__* ]] || grep -qxF -- "${m%%.*}" "$names"; then
      pick=$m; break
    fi
  done
  if [ -z "$pick" ]; then say "${alts//|/ or } not offered here, not collected"; continue; fi
  if [ "$kind" = required ]; then required="${required:+$required,}$pick"; else optional="${optional:+$optional,}$pick"; fi
done < <(python3 "$root/scripts/ncu_ledger.py" --metrics)
sets=("$required${optional:+,$optional}" "$required")

# ---- the profiles ---------------------------------------------------------------------------------
if [ "$variants" = all ]; then
  list=$("$build/bench" --list --steps "$step") || { say "bench --list --steps $step failed"; exit 1; }
else
  list="step$step"
fi
rm -f "$out"
header=1 fail=0
while read -r prog vflags; do
  [ -n "$prog" ] || continue
  for n in $ns; do
    for causal in $masks; do
      b=$(( 16384 / n )); h=16; d=128
      args=(--b $b --h $h --n $n --d $d --reps 0 --backend gpu --ledger-csv "$work/ledger.csv")
      [ "$causal" = 1 ] && args+=(--causal)
      got=""
      for i in "${!sets[@]}"; do
        rm -f "$work/ncu_raw.csv"
        ncu --clock-control none --csv --print-units base --metrics "${sets[$i]}" --log-file "$work/ncu_raw.csv" \
          "$build/$prog" "${args[@]}" $vflags >>"$log" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && grep -q '"ID"' "$work/ncu_raw.csv" 2>/dev/null; then got=$i; break; fi
        say "  ncu refused or failed (rc $rc) with metric set $i (see $log)"
      done
      if [ -z "$got" ]; then say "  ncu $prog $vflags N=$n causal=$causal failed; see $log"; fail=1; continue; fi
      [ "$got" -gt 0 ] && sets=("${sets[@]:$got}")
      variant=$(echo "${vflags:--}" | sed 's/^--\([a-z]*\) /\1=/')
      if HEADER=$header python3 "$root/scripts/ncu_ledger.py" "$work/ncu_raw.csv" "$work/ledger.csv" "${prog}_" \
           date="$date_utc" commit="$commit" gpu="$gpu" step="$step" variant="$variant" B=$b H=$h N=$n d=$d causal=$causal \
           >>"$out"; then
        header=0
        say "  ncu $prog $vflags N=$n causal=$causal: done"
      else
        say "  ncu_ledger.py failed for $prog $vflags N=$n causal=$causal"; fail=1
      fi
    done
  done
done <<<"$list"
rm -f "$work/ncu_raw.csv" "$work/ledger.csv"
exit $fail
