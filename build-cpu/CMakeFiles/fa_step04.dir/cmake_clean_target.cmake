file(REMOVE_RECURSE
  "libfa_step04.a"
)
