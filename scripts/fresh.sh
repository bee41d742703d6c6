# fa_fresh ROOT BUILD (source this file; scripts/setup.sh does): touch each source under ROOT whose
# content changed since BUILD's last set-up, so that make rebuilds what depends on it.
# Why: make compares times, not contents. A tree copied again onto a machine that kept its build
# folder (the GPU machine keeps ignored build outputs between calls), or an older file put back by
# `git checkout`, can carry a source whose time is older than the objects built from its newer
# version; make then keeps the stale objects, and a run measures the wrong kernel. BUILD keeps a
# checksum of every source (.fa_source_sums); the first set-up of a folder only writes it.
fa_fresh() {
  local root="$1" build="$2" sums now changed n
  sums="$build/.fa_source_sums"
  now=$(cd "$root" && find CMakeLists.txt steps common tests plots python -type f \
          \( -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name 'CMakeLists.txt' -o -name '*.cmake' \) \
          -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 -r sha1sum)
  if [ -f "$sums" ]; then
    # The lines of now that the old list lacks: a changed checksum, or a new file.
    changed=$(LC_ALL=C comm -23 <(printf '%s\n' "$now" | LC_ALL=C sort) <(LC_ALL=C sort "$sums") | cut -c43-)
    if [ -n "$changed" ]; then
      (cd "$root" && printf '%s\n' "$changed" | xargs -d '\n' touch --)
      n=$(printf '%s\n' "$changed" | wc -l)
      printf '[fa] %s source(s) changed since %s was last set up: touched, so that make rebuilds them\n' "$n" "$build" >&2
    fi
  fi
  mkdir -p "$build" && printf '%s\n' "$now" >"$sums"
}
