#!/usr/bin/env bash
# Step 18 over several GPUs: start P processes of ring_nccl, one per GPU, and wait for them all.
#   scripts/ring.sh P [ring_nccl flags: --n N --h H --d D --causal 0|1 --shard zigzag|contiguous --reps R --out FILE ...]
# Each process gets FA_RANK, FA_WORLD and FA_LOCAL_RANK (its GPU) and the file through which rank 0
# hands the others NCCL's communicator id. With FA_MPIRUN=1 it runs `mpirun -np P` instead (the
# program reads Open MPI's rank variables). The exit status is the first failing rank's, else 0.
set -euo pipefail
FA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FA_BUILD="${FA_BUILD:-$FA_ROOT/build}"
say() { printf '[ring] %s\n' "$*" >&2; }
if [ $# -lt 1 ] || ! [[ "$1" =~ ^[1-8]$ ]]; then
  say "usage: scripts/ring.sh P [ring_nccl flags]   (P: 1 to 8 ranks, one GPU each)"
  exit 2
fi
P="$1"; shift
BIN="${FA_RING_NCCL:-$FA_BUILD/ring_nccl}"
if [ ! -x "$BIN" ]; then
  say "$BIN is not built: CMake found no NCCL when it configured $FA_BUILD (its 'NCCL:' line says where it looked)."
  say "Install NCCL (libnccl-dev, or pip's nvidia-nccl-cu13), or set NCCL_HOME, then configure again."
  exit 2
fi
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
if [ "$GPUS" -lt "$P" ]; then
  say "P = $P ranks but this machine shows $GPUS GPU(s): NCCL needs one GPU per rank (on one GPU, run ./step18 --ranks $P: P streams)."
  [ "${FA_RING_ALLOW_SHARED:-0}" = 1 ] || exit 2
  say "FA_RING_ALLOW_SHARED=1: trying anyway (ranks share GPUs round-robin; NCCL may refuse)"
fi
if [ "${FA_MPIRUN:-0}" = 1 ]; then
  exec mpirun -np "$P" "$BIN" "$@"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=()
for ((r = 0; r < P; r++)); do
  FA_RANK=$r FA_WORLD=$P FA_LOCAL_RANK=$r FA_NCCL_ID="$dir/nccl.id" "$BIN" "$@" &
  pids+=($!)
done
rc=0
set +e
for ((left = P; left > 0; left--)); do
  wait -n
  st=$?
  if [ "$st" -ne 0 ] && [ "$rc" -eq 0 ]; then
    rc=$st
    say "a rank exited with status $st: stopping the others (they would wait for it in NCCL)"
    kill "${pids[@]}" 2>/dev/null
  fi
done
exit "$rc"
