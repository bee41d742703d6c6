file(REMOVE_RECURSE
  "CMakeFiles/fa_step03.dir/steps/03_fa1_kv_outer/blueprint.cpp.o"
  "CMakeFiles/fa_step03.dir/steps/03_fa1_kv_outer/blueprint.cpp.o.d"
  "libfa_step03.a"
  "libfa_step03.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/fa_step03.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
