file(REMOVE_RECURSE
  "libfa_step03.a"
)
