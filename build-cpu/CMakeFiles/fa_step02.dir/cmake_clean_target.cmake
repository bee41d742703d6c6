file(REMOVE_RECURSE
  "libfa_step02.a"
)
