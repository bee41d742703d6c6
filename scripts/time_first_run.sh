#!/usr/bin/env bash
# What a newcomer waits for: a fresh clone's `scripts/run.sh` (build what the tour needs, run it),
# timed on this machine, and with --tests its `scripts/test.sh` (CI's command) too. One CSV row per
# command, appended to OUT (default plots/data/first_run.csv), read by scripts/doc_tables.py for the
# README's "first-run" table:
#   date,commit,machine,cores,gpu,command,build_s,run_s,total_s
# build_s + run_s: the first call (from nothing) and a second one right after (the build already
# there: the run alone); test.sh has its total only.
# Usage: scripts/time_first_run.sh [--tests] [OUT]     FA_MACHINE="2-core CPU machine" names the row;
#   FA_COMMIT=abc1234 copies this tree's files instead of cloning, and names the row with it (for a
#   copy of a tree whose .git is not its commit)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tests=0
[ "${1:-}" = "--tests" ] && { tests=1; shift; }
out="${1:-$root/plots/data/first_run.csv}"
say() { printf '[first-run] %s\n' "$*" >&2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "${FA_COMMIT:-}" ] && git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
  commit=$(git -C "$root" rev-parse --short HEAD)
  git -C "$root" diff --quiet HEAD || say "uncommitted changes are not in the clone: it is commit $commit"
  git clone -q "$root" "$tmp/fa"
else  # FA_COMMIT given, or no git (a GPU machine's copy of a tree): the files as they are, named FA_COMMIT
  commit=${FA_COMMIT:-unknown}
  mkdir -p "$tmp/fa"
  (cd "$root" && tar --exclude=./build --exclude='./build-*' --exclude=./.deps -cf - .) | tar -xf - -C "$tmp/fa"
fi
# An offline machine's dependencies (scripts/fetch_deps.sh) are not part of a clone: lend them.
[ -d "$root/.deps" ] && ln -s "$root/.deps" "$tmp/fa/.deps"

cores=$(nproc 2>/dev/null || echo "")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)
gpu=${gpu:-none}
machine=${FA_MACHINE:-"$cores cores, ${gpu/none/no GPU}"}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

[ -f "$out" ] || echo "date,commit,machine,cores,gpu,command,build_s,run_s,total_s" >"$out"
row() { echo "$(date -u +%Y-%m-%d),$commit,\"$machine\",$cores,\"$gpu\",$1,$2,$3,$4" >>"$out"; }

say "fresh clone of $commit in $tmp/fa; scripts/run.sh (first call: build and run)"
t0=$(now)
(cd "$tmp/fa" && scripts/run.sh >"$tmp/run1.log" 2>&1) || { tail -n 40 "$tmp/run1.log" >&2; say "scripts/run.sh failed"; exit 1; }
t1=$(now)
say "first call: $(secs "$t0" "$t1") s; second call (the run alone)"
(cd "$tmp/fa" && scripts/run.sh >"$tmp/run2.log" 2>&1) || { tail -n 40 "$tmp/run2.log" >&2; say "second call failed"; exit 1; }
t2=$(now)
run_s=$(secs "$t1" "$t2")
total=$(secs "$t0" "$t1")
row scripts/run.sh "$((total - run_s))" "$run_s" "$total"
say "scripts/run.sh: $total s in all, the run alone $run_s s"
if [ "$tests" = 1 ]; then
  say "scripts/test.sh on the same clone (every architecture, every test)"
  t0=$(now)
  (cd "$tmp/fa" && scripts/test.sh >"$tmp/test.log" 2>&1) || { tail -n 40 "$tmp/test.log" >&2; say "scripts/test.sh failed"; exit 1; }
  t1=$(now)
  row scripts/test.sh "" "" "$(secs "$t0" "$t1")"
  say "scripts/test.sh: $(secs "$t0" "$t1") s ($(grep -E 'tests passed|tests failed' "$tmp/test.log" | tail -n1))"
fi
say "appended to $out"
