file(REMOVE_RECURSE
  "libfa_common.a"
)
