#!/usr/bin/env bash
# Labs: every step is also an exercise, generated from the step itself (docs/labs/README.md).
#
#   scripts/lab.sh start NN [--cpu|--gpu]   write lab/NN_name/: the step's files with the regions that
#                                           carry its idea blanked. --cpu (the default without a GPU):
#                                           blueprint.cpp, no kernel.cu, built in build-cpu/ without CUDA
#                                           (no kernel is compiled); --gpu:
#                                           kernel.cu, built in build/. It says the make line to use.
#   scripts/lab.sh reset NN                 the same again, over your work (asks first)
#   scripts/lab.sh diff NN                  your files against the step's own
#   scripts/lab.sh list                     every step's lab regions (name: hint)
#   scripts/lab.sh blank FILE               FILE with its regions blanked, on stdout (what start writes)
#   scripts/lab.sh export DIR               a student tree in DIR (new or empty): the repository with
#                                           every step's regions blanked, without the instructor notes
#                                           and the mutants; the grader and the handouts intact
#
# A region is marked in the step's own files:
#     // lab:begin NAME {TAGS}: one-line hint      ({TAGS}: where a mistake shows, for --grade; optional)
#     ... the code that carries the idea ...
#     // lab:end
# and blanked into "// TODO(lab) NAME {TAGS}: one-line hint" at the same indentation. The blanked file
# still compiles (declarations stay outside the regions) and fails the step's checks: `./labNN --grade`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
say() { printf '[lab] %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

blank() {
  awk -v file="$1" '
    /^[ \t]*\/\/ lab:begin / {
      if (open) { printf "%s:%d: lab:begin inside another region\n", file, NR > "/dev/stderr"; exit 3 }
      ind = $0; sub(/\/\/.*/, "", ind); text = $0; sub(/^[ \t]*\/\/ lab:begin /, "", text)
      print ind "// TODO(lab) " text; open = 1; start = NR; next
    }
    /^[ \t]*\/\/ lab:end/ {
      if (!open) { printf "%s:%d: lab:end without lab:begin\n", file, NR > "/dev/stderr"; exit 3 }
      open = 0; next
    }
    !open { print }
    END { if (open) { printf "%s:%d: lab:begin without lab:end\n", file, start > "/dev/stderr"; exit 3 } }
  ' "$1"
}

step_dir() {  # NN -> steps/NN_name
  local d
  d=$(ls -d "$root"/steps/"$1"_* 2>/dev/null | head -n1)
  [ -n "$d" ] || die "no step $1 (ids look like 06; see steps/)"
  echo "$d"
}

cmd=${1:-}
case "$cmd" in
  blank)
    [ $# -eq 2 ] || die "usage: scripts/lab.sh blank FILE"
    blank "$2"
    ;;
  list)
    for d in "$root"/steps/[0-9][0-9]_*; do
      for f in "$d"/kernel.cu "$d"/blueprint.cpp; do
        [ -f "$f" ] || continue
        grep -n '// lab:begin ' "$f" | sed "s|^\([0-9]*\):[ \t]*// lab:begin |${f#$root/}:\1  |" || true
      done
    done
    ;;
  start|reset)
    [ $# -ge 2 ] || die "usage: scripts/lab.sh $cmd NN [--cpu|--gpu]"
    nn=$2; src=$(step_dir "$nn"); name=$(basename "$src")
    track=${3:-}
    if [ -z "$track" ]; then
      if nvidia-smi -L >/dev/null 2>&1; then track=--gpu; else track=--cpu; fi
    fi
    case "$track" in --cpu|--gpu) ;; *) die "the track is --cpu or --gpu, not '$track'" ;; esac
    dst="$root/lab/$name"
    if [ -d "$dst" ] && [ "$cmd" = start ]; then
      die "lab/$name exists already: keep working there, or 'scripts/lab.sh reset $nn' to start over"
    fi
    if [ -d "$dst" ] && [ "$cmd" = reset ] && [ -t 0 ]; then
      read -r -p "[lab] overwrite your files in lab/$name? [y/N] " ok
      [ "$ok" = y ] || [ "$ok" = Y ] || die "left as it was"
    fi
    mkdir -p "$dst"
    cp "$src/schedule.hpp" "$dst/"
    rm -f "$dst/kernel.cu"
    for f in blueprint.cpp kernel.cu; do
      [ -f "$src/$f" ] || continue
      # The CPU track builds without CUDA: the kernel (the GPU track's answer) is not handed out.
      [ "$f" = kernel.cu ] && [ "$track" = --cpu ] && continue
      if { [ "$f" = blueprint.cpp ] && [ "$track" = --cpu ]; } || { [ "$f" = kernel.cu ] && [ "$track" = --gpu ]; }; then
        blank "$src/$f" >"$dst/$f"
        n=$(grep -c '// TODO(lab)' "$dst/$f" || true)
        say "lab/$name/$f: $n region(s) to write"
        grep -n '// TODO(lab)' "$dst/$f" | sed 's/^/    /' >&2 || true
      else
        cp "$src/$f" "$dst/"
      fi
    done
    echo "${track#--}" >"$dst/TRACK"
    jobs=$(nproc 2>/dev/null || echo 2)
    if [ "$track" = --cpu ]; then
      # The CPU track's own build folder, configured without CUDA (scripts/setup.sh: the dependencies too).
      say "configuring build-cpu/ without CUDA (the CPU track compiles no kernel)"
      ( FA_BUILD="$root/build-cpu"; FA_CMAKE_EXTRA=(-DFA_ENABLE_CUDA=OFF); source "$root/scripts/setup.sh"
        cmake -S "$root" -B "$FA_BUILD" >/dev/null ) || die "CMake could not configure build-cpu/"
      say "now: read docs/labs/$name.md, edit lab/$name/, then: cd build-cpu && make -j$jobs lab$nn && ./lab$nn --grade"
    else
      # The build picks lab/ up at configure time: reconfigure an existing build folder.
      if [ -f "$root/build/CMakeCache.txt" ]; then
        cmake -S "$root" -B "$root/build" >/dev/null || die "CMake could not reconfigure build/"
      fi
      say "now: read docs/labs/$name.md, edit lab/$name/, then: cd build && make -j$jobs lab$nn && ./lab$nn --grade"
    fi
    ;;
  export)
    [ $# -eq 2 ] || die "usage: scripts/lab.sh export DIR"
    out=$2
    if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then die "$out exists and is not empty"; fi
    git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || die "export copies the files git tracks: run it in a clone"
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    case "$out/" in "$root"/*) [ "$out" = "$root/build/student" ] || [[ "$out" == "$root"/build*/* ]] \
      || die "write the student tree outside the repository (or under a build folder)" ;; esac
    # What a student must not get: the answers to the labs' questions, and the mutants (their
    # context lines are the solution). Everything else git tracks goes, the lab/ folder does not.
    n=0
    while IFS= read -r -d '' f; do
      case "$f" in docs/labs/instructor/*|tests/mutants/*|lab/*) continue ;; esac
      [ -f "$root/$f" ] || continue
      mkdir -p "$out/$(dirname "$f")"
      cp -p "$root/$f" "$out/$f"
      n=$((n + 1))
    done < <(git -C "$root" ls-files -z --cached --others --exclude-standard)
    regions=0
    for f in "$out"/steps/[0-9][0-9]_*/blueprint.cpp "$out"/steps/[0-9][0-9]_*/kernel.cu; do
      [ -f "$f" ] || continue
      blank "$f" >"$f.blank" || die "${f#$out/}: its lab markers are broken"
      regions=$((regions + $(grep -c '// TODO(lab)' "$f.blank" || true)))
      mv "$f.blank" "$f"
    done
    if grep -rl '// lab:begin ' "$out/steps" >/dev/null 2>&1; then die "a lab region is left in $out/steps"; fi
    commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
    cat >"$out/STUDENT_TREE.md" <<EOT
# A student tree

This is the course's repository (at $commit) with every lab region of every step blanked into
\`// TODO(lab) NAME {TAGS}: hint\`: the steps' \`blueprint.cpp\` (the CPU track) and \`kernel.cu\` (the
GPU track) compile, and fail their grades until the regions are written. The handouts are in
\`docs/labs/\`, the grader in every step program (\`./stepNN --grade\`); the instructor notes are not here.

- Work in \`lab/\` as the handouts say (\`scripts/lab.sh start NN --cpu\`), or in \`steps/\` itself.
- The repository's own tests are not built here (they test the solutions); the step programs and the
  labs are.
- Labs 08 and 13 run the forward of steps 07 and 12, lab 18 step 12's kernels: here those are your
  labs 07 and 12 (\`lab/07_causal_skip\`, \`lab/12_warp_tiling\`) once you have started them, and the
  blanked steps otherwise. Do labs 07 and 12 first.
- Steps build on each other: a later step's files carry the ideas of the earlier labs. Blanked are
  only each step's own regions.
EOT
    say "wrote the student tree $out: $n files, $regions lab regions blanked (at $commit)"
    say "build it: cd $out && scripts/run.sh step06   (or cmake -S . -B build-cpu -DFA_ENABLE_CUDA=OFF)"
    ;;
  diff)
    [ $# -eq 2 ] || die "usage: scripts/lab.sh diff NN"
    nn=$2; src=$(step_dir "$nn"); name=$(basename "$src"); dst="$root/lab/$name"
    [ -d "$dst" ] || die "no lab/$name yet: scripts/lab.sh start $nn"
    rc=0
    for f in schedule.hpp blueprint.cpp kernel.cu; do
      [ -f "$src/$f" ] && [ -f "$dst/$f" ] || continue
      diff -u --label "steps/$name/$f (the step's)" --label "lab/$name/$f (yours)" "$src/$f" "$dst/$f" || rc=1
    done
    exit $rc
    ;;
  *)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
