file(REMOVE_RECURSE
  "libfa_registry.a"
)
