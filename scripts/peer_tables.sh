#!/usr/bin/env bash
# Every table that sets the course's steps beside PyTorch's SDPA backends, measured in one run on one
# GPU by one clock on both sides (docs/profiling.md, "One clock"): the kernel time of a call, every
# kernel it launches summed from CUPTI's records, each rep on a cold L2 (the steps' runner for ours,
# scripts/clock.py through torch.profiler for PyTorch's), with the time per call in a CUDA graph and
# the CUDA-event time beside it.
#   scripts/peer_tables.sh OUTDIR [PHASE ...]     (after a build: FA_BUILD, default build/)
# Phases (default: all, in this order), each our rows and the peers' rows on the same shapes — the
# target matrices of scripts/targets.txt (decode, bwd, fwd, early):
#   decode  step 17 (contiguous and paged), step 12 as prefill, every SDPA backend (decode_target.py)
#                                                   -> decode_<gpu>.csv           (docs/17: step17-target)
#   bwd     steps 13 and 19's backward, N = 1k, 4k, 16k, d = 64, 128, both masks, fp16 and bf16; flash and cuDNN's
#                                                   -> clock_<gpu>_bwd.csv, peers_<gpu>_clock_bwd.csv (step13-target)
#   fwd     steps 12, 14, 15, 16, 20 over N = 1k ... 16k, d = 64, 128 (14-16, 20 also 256), both masks, fp16 and
#           bf16; flash and cuDNN's forward       -> clock_<gpu>_fwd.csv, peers_<gpu>_clock_fwd.csv
#                                                      (step12-target, step14/15-target, step16-target, step16-d256)
#   fwd20   steps 16 and 20 alone over the fwd matrix and d = 256, with flash and cuDNN's forward: step 20's
#           target in one run (a shorter call than fwd); FA_FWD20_SET=exp2=mufu runs step 20 with that flag
#           pinned (bench --set; table step20-mufu), beside the default's rows a file may already hold
#                                                   -> clock_<gpu>_fwd20.csv, peers_<gpu>_clock_fwd20.csv (step20-target)
#   early   steps 07 (forward) and 08 (backward), fp16, N = 512 ... 16k, d = 64, 128, both masks; flash
#           and cuDNN, forward and backward    -> clock_<gpu>_early.csv, peers_<gpu>_clock_early.csv (versus-peers)
# FA_DEADLINE (seconds since the epoch): no new point starts after it; what was left is written as not
# run, and the same command resumes the step rows (bench skips rows its file has). FA_REPS (default 10)
# timed reps per row. Every run is checked against the reference; a failed check makes the exit status 1.
set -uo pipefail
me=peer_tables.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
source "$root/scripts/targets.sh"       # target MATRIX AXIS: the matrices of scripts/targets.txt
for m in bwd fwd early; do for a in ns ds causal dtypes; do target $m $a >/dev/null || exit 2; done; done
target fwd wide_ds >/dev/null || exit 2
shift
phases="${*:-decode bwd fwd early}"
deadline=${FA_DEADLINE:-$(( $(date +%s) + 36000 ))}
reps=${FA_REPS:-10}
fail=0
left() { echo $(( deadline - $(date +%s) )); }
bench() {  # bench ARGS...: within what is left of the deadline
  local s; s=$(left)
  [ "$s" -gt 5 ] || { echo "$me: past the deadline: bench $* not started" >&2; fail=1; return; }
  "$build/bench" --check-heads 1 --reps "$reps" --commit "$commit" --budget-s "$s" "$@" >&2 || fail=1
}
peers() {  # peers OUT ARGS...
  python3 "$root/scripts/peers.py" "$@" --reps "$reps" --commit "$commit" --deadline "$deadline" || fail=1
}
for ph in $phases; do
  echo "[$me $(date -u +%H:%M:%S)] $ph ($(left) s left)" >&2
  case $ph in
    decode)
      python3 "$root/scripts/decode_target.py" "$out/decode_${slug}.csv" --build "$build" --reps "$reps" --commit "$commit" \
        --deadline "$deadline" || fail=1 ;;
    bwd)
      bench --steps 13,19 --ns "$(target bwd ns)" --ds "$(target bwd ds)" --causal "$(target bwd causal)" \
        --dtypes "$(target bwd dtypes)" --variants default --out "$out/clock_${slug}_bwd.csv"
      peers "$out/peers_${slug}_clock_bwd.csv" --backends flash,cudnn --ns "$(target bwd ns)" --ds "$(target bwd ds)" \
        --dtypes "$(target bwd dtypes)" ;;
    fwd)
      bench --steps 12,14,15,16,20 --ns "$(target fwd ns)" --ds "$(target fwd ds),$(target fwd wide_ds)" \
        --causal "$(target fwd causal)" --dtypes "$(target fwd dtypes)" --variants default --out "$out/clock_${slug}_fwd.csv"
      peers "$out/peers_${slug}_clock_fwd.csv" --backends flash,cudnn --ns "$(target fwd ns)" \
        --ds "$(target fwd ds),$(target fwd wide_ds)" --dtypes "$(target fwd dtypes)" --fwd-only ;;
    fwd20)
      bench --steps 16,20 --ns "$(target fwd ns)" --ds "$(target fwd ds),$(target fwd wide_ds)" \
        --causal "$(target fwd causal)" --dtypes "$(target fwd dtypes)" --variants default \
        ${FA_FWD20_SET:+--set "$FA_FWD20_SET"} --out "$out/clock_${slug}_fwd20.csv"
      peers "$out/peers_${slug}_clock_fwd20.csv" --backends flash,cudnn --ns "$(target fwd ns)" \
        --ds "$(target fwd ds),$(target fwd wide_ds)" --dtypes "$(target fwd dtypes)" --fwd-only ;;
    early)
      bench --steps 07,08 --ns "$(target early ns)" --ds "$(target early ds)" --causal "$(target early causal)" \
        --dtypes "$(target early dtypes)" --variants default --out "$out/clock_${slug}_early.csv"
      peers "$out/peers_${slug}_clock_early.csv" --backends flash,cudnn --ns "$(target early ns)" --ds "$(target early ds)" \
        --dtypes "$(target early dtypes)" ;;
    *) echo "$me: unknown phase '$ph' (decode, bwd, fwd, fwd20, early)" >&2; exit 2 ;;
  esac
done
echo "[$me $(date -u +%H:%M:%S)] done: $phases (exit $fail)" >&2
exit $fail
