#!/usr/bin/env bash
# Step 20's measurements in one call on a GPU machine (docs/20_persistent.md, "Measured"):
#   scripts/step20_target.sh OUTDIR        (after a build: FA_BUILD, default build/)
# 1. the target: steps 16 and 20 beside PyTorch's flash and cuDNN, the fwd matrix and d = 256, one clock
#    (scripts/peer_tables.sh's fwd20 phase)                 -> clock_<gpu>_fwd20.csv, peers_<gpu>_clock_fwd20.csv
# 2. --exp2's three ways, bf16, N = 1k and 16k, d = 64, 128, 256, both masks   -> exp2_<gpu>_step20.csv
# 3. each change taken out alone (bench --variants ablations), fp16, N = 1k and 16k, d = 64 and 128, both
#    masks                                                    -> ablation_<gpu>_step20.csv
# FA_FWD20_SET=exp2=mufu: the target phase with step 20 at that flag (bench --set; table step20-mufu).
# FA_PHASES (default "target exp2 ablation") picks phases; FA_REPS (default 10) timed reps per row. Every run
# is checked against the reference; a failed check makes the exit status 1.
set -uo pipefail
me=step20_target.sh
source "$(dirname "$0")/target_env.sh"  # root, out, build, gpu, slug, commit, date_utc
reps=${FA_REPS:-10}
fail=0
need_programs bench step16 step20
for ph in ${FA_PHASES:-target exp2 ablation}; do
  echo "[$me $(date -u +%H:%M:%S)] $ph" >&2
  case $ph in
    target) FA_REPS=$reps "$root/scripts/peer_tables.sh" "$out" fwd20 || fail=1 ;;
    exp2) rm -f "$out/exp2_${slug}_step20.csv"
      "$build/bench" --steps 20 --variants all --dtypes bf16 --ns 1024,16384 --ds 64,128,256 --causal 0,1 \
        --check-heads 1 --reps "$reps" --commit "$commit" --out "$out/exp2_${slug}_step20.csv" >&2 || fail=1 ;;
    ablation) rm -f "$out/ablation_${slug}_step20.csv"
      "$build/bench" --steps 20 --variants ablations --dtypes fp16 --ns 1024,16384 --ds 64,128 --causal 0,1 \
        --check-heads 1 --reps "$reps" --commit "$commit" --out "$out/ablation_${slug}_step20.csv" >&2 || fail=1 ;;
    *) echo "$me: unknown phase '$ph' (target, exp2, ablation)" >&2; exit 2 ;;
  esac
done
echo "[$me $(date -u +%H:%M:%S)] done (exit $fail): copy the files to plots/data/ and run scripts/doc_tables.py" >&2
exit $fail
