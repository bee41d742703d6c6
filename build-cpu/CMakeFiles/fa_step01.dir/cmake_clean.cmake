file(REMOVE_RECURSE
  "CMakeFiles/fa_step01.dir/steps/01_naive/blueprint.cpp.o"
  "CMakeFiles/fa_step01.dir/steps/01_naive/blueprint.cpp.o.d"
  "libfa_step01.a"
  "libfa_step01.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/fa_step01.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
