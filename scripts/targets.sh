# The target matrices of scripts/targets.txt, for bash: source this file, then
#   target MATRIX AXIS          the axis's values, comma-separated ("1024,4096,16384")
#   target_words MATRIX AXIS    the same, space-separated, for a `for` loop
# An axis the file lacks is an error (exit status 2 and a message), so a typo cannot run an empty loop.
FA_TARGETS="${FA_TARGETS:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/targets.txt}"
target() {
  local m a v
  while read -r m a v _; do
    [[ -z "$m" || "$m" == \#* ]] && continue
    if [ "$m" = "$1" ] && [ "$a" = "$2" ]; then echo "$v"; return 0; fi
  done <"$FA_TARGETS"
  echo "targets.sh: no axis '$2' of matrix '$1' in $FA_TARGETS" >&2
  return 2
}
target_words() { local v; v=$(target "$1" "$2") || return 2; echo "${v//,/ }"; }
