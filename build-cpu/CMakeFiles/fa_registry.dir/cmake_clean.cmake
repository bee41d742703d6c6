file(REMOVE_RECURSE
  "CMakeFiles/fa_registry.dir/gen/registry.cpp.o"
  "CMakeFiles/fa_registry.dir/gen/registry.cpp.o.d"
  "libfa_registry.a"
  "libfa_registry.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/fa_registry.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
