file(REMOVE_RECURSE
  "libfa_step01.a"
)
