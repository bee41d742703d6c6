#!/usr/bin/env bash
# The Python package's GPU run (docs/python.md), in one go on a machine with a CUDA GPU and PyTorch:
#   1. build the package's C library (fa_python) in FA_BUILD (default build/, the GPU's architecture);
#   2. its pytest suite on the GPU: flash_attn's whole matrix, varlen, the KV cache, deterministic
#      reruns, torch.compile (python/tests/run.py cuda --full; the log: OUTDIR/pytest_gpu.log);
#   3. scripts/peers.py with the package beside SDPA's flash and cuDNN on the backward target matrix
#      (scripts/targets.txt, "bwd"), by the one clock: OUTDIR/pypeers_<gpu>.csv;
#   4. the small GPT (python/examples/gpt.py), SDPA (cuDNN) and the package, seeds 0, 1, 2, FA_GPT_STEPS
#      steps each: OUTDIR/gpt_steps_<gpu>.csv (a row per step), gpt_runs_<gpu>.csv (a row per run) and
#      gpt_hostprof_<gpu>.txt (cProfile of a few more steps per run: where the host time goes);
#   5. dQ's precision at long key ranges (python/examples/dq_long_keys.py: one query row against up to 40k
#      keys, d = 128, bf16, steps 19 and 13 beside SDPA's backends, and with 8 query heads per K/V head):
#      OUTDIR/dq_long_keys_<gpu>.csv (docs/19_hopper_backward.md, "dQ at long key ranges").
# Usage: scripts/python_gpu.sh [OUTDIR]      (default plots/data)
#   FA_PYTEST=0 FA_PEERS=0 FA_GPT=0 FA_DQ=0   skip a phase
#   FA_GPT_STEPS=1000                 training steps per run;  FA_GPT_SEEDS=0,1,2
#   FA_COMMIT=abc1234                 the rows' commit, when the tree has no .git
# Exit status: 0 when every phase that ran passed, else the first failure's (a GPU test failing is 1).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-$root/plots/data}")"
mkdir -p "$out"
t0=$(date +%s)
say() { printf '[python_gpu %4ds] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
[ -n "$gpu" ] || { say "no GPU visible (nvidia-smi): this script is for a GPU machine"; exit 2; }
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/_/g; s/^_//; s/_$//')
export FA_COMMIT="${FA_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch" 2>/dev/null; then py="$p"; break; fi
done
[ -n "$py" ] || { say "no python3 here imports torch"; exit 2; }
say "GPU $gpu, commit $FA_COMMIT, $("$py" -c 'import torch; print("torch", torch.__version__)')"

source "$root/scripts/setup.sh"
say "building fa_python in $FA_BUILD"
make -C "$FA_BUILD" -j"$FA_JOBS" --no-print-directory fa_python >"$out/python_build.log" 2>&1 \
  || { tail -n 40 "$out/python_build.log" >&2; say "build failed"; exit 1; }
export FLASH_ATTN_STEPS_LIB="$FA_BUILD/libfa_python.so" PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
rc=0

if [ "${FA_PYTEST:-1}" = 1 ]; then
  say "pytest on the GPU, flash_attn's whole matrix (log: $out/pytest_gpu.log)"
  "$py" "$root/python/tests/run.py" cuda --full >"$out/pytest_gpu.log" 2>&1
  r=$?
  tail -n 3 "$out/pytest_gpu.log" >&2
  [ $r -eq 0 ] || { say "pytest exited $r"; [ $rc -ne 0 ] || rc=$r; }
fi

if [ "${FA_PEERS:-1}" = 1 ]; then
  source "$root/scripts/targets.sh"
  say "peers.py: the package, flash and cuDNN on the backward matrix -> pypeers_${slug}.csv"
  "$py" "$root/scripts/peers.py" "$out/pypeers_${slug}.csv" --backends package,flash,cudnn \
    --ns "$(target bwd ns)" --ds "$(target bwd ds)" --dtypes "$(target bwd dtypes)" --reps 10 \
    --commit "$FA_COMMIT" || { r=$?; say "peers.py exited $r"; [ $rc -ne 0 ] || rc=$r; }
fi

if [ "${FA_GPT:-1}" = 1 ]; then
  rm -f "$out/gpt_steps_${slug}.csv" "$out/gpt_runs_${slug}.csv" "$out/gpt_hostprof_${slug}.txt"
  for be in sdpa steps; do
    say "the small GPT with $be, seeds ${FA_GPT_SEEDS:-0,1,2}, ${FA_GPT_STEPS:-1000} steps"
    "$py" "$root/python/examples/gpt.py" --backend "$be" --seeds "${FA_GPT_SEEDS:-0,1,2}" \
      --steps "${FA_GPT_STEPS:-1000}" --out "$out/gpt_steps_${slug}.csv" --summary "$out/gpt_runs_${slug}.csv" \
      --host-profile "$out/gpt_hostprof_${slug}.txt" \
      || { r=$?; say "gpt.py ($be) exited $r"; [ $rc -ne 0 ] || rc=$r; }
  done
fi

if [ "${FA_DQ:-1}" = 1 ]; then
  say "dQ at long key ranges -> dq_long_keys_${slug}.csv"
  "$py" "$root/python/examples/dq_long_keys.py" --device cuda --out "$out/dq_long_keys_${slug}.csv" \
    || { r=$?; say "dq_long_keys.py exited $r"; [ $rc -ne 0 ] || rc=$r; }
  "$py" "$root/python/examples/dq_long_keys.py" --device cuda --group 8 --nks 40960 --out "$out/dq_long_keys_gqa_${slug}.csv" \
    || { r=$?; say "dq_long_keys.py --group 8 exited $r"; [ $rc -ne 0 ] || rc=$r; }
fi
say "done (exit $rc)"
exit $rc
